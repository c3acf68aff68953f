//! The kubeconfig clients use to reach the cluster.

/// The cluster, context and user name in the kubeconfig.
pub const CONTEXT: &str = "devcluster";
/// The bearer token the kubeconfig presents (devcluster authorizes everything; the token
/// only shows up in the request counters as the client's identity).
pub const TOKEN: &str = "devcluster-admin";

/// A kubeconfig (YAML) for a server at `url`.
pub(crate) fn render(url: &str) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: {CONTEXT}\n  cluster:\n    server: {url}\n\
         contexts:\n\
         - name: {CONTEXT}\n  context:\n    cluster: {CONTEXT}\n    user: {CONTEXT}\n    namespace: default\n\
         current-context: {CONTEXT}\n\
         preferences: {{}}\n\
         users:\n\
         - name: {CONTEXT}\n  user:\n    token: {TOKEN}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_points_at_the_server() {
        let k = render("http://127.0.0.1:1234");
        assert!(k.contains("    server: http://127.0.0.1:1234\n"));
        assert!(k.contains("current-context: devcluster\n"));
    }
}
