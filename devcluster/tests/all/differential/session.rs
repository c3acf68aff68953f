//! One server, and one scenario's requests to it, recorded.

use std::path::{Path, PathBuf};
use std::time::Duration;

use devcluster::{Config, DevCluster};
use http::{Method, Request};
use http_body_util::BodyExt as _;
use kube::Client;
use serde_json::{Value, json};

use super::compare::Normaliser;

/// The server a scenario runs against.
pub struct Server {
    pub name: &'static str,
    pub client: Client,
    pub kubeconfig: PathBuf,
    /// Kept alive while the server is in use.
    devcluster: Option<DevCluster>,
}

impl Server {
    /// A fresh devcluster (no Pod simulation: Pods are only stored, as on a
    /// server whose nodes never run them) with `deploy/`'s DataJob CRD.
    pub async fn devcluster() -> Self {
        let dc = DevCluster::start(Config {
            pods: None,
            ..Config::default()
        })
        .await
        .expect("devcluster starts");
        let kubeconfig = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "differential-{}-{}.kubeconfig",
            std::process::id(),
            dc.addr().port()
        ));
        dc.write_kubeconfig(&kubeconfig).unwrap();
        let server = Self {
            name: "devcluster",
            client: dc.client().expect("a client"),
            kubeconfig,
            devcluster: Some(dc),
        };
        let crd: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crd.yaml"),
            )
            .unwrap(),
        )
        .unwrap();
        let (status, body) = server
            .send(
                Method::POST,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                &[],
                Some(&crd),
            )
            .await;
        assert_eq!(status, 201, "the CRD is created: {body}");
        server
    }

    /// The cluster `kubeconfig` names (with `deploy/`'s CRD installed).
    pub async fn real(kubeconfig: &Path) -> Self {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(kubeconfig).expect("a readable kubeconfig"),
            &Default::default(),
        )
        .await
        .expect("a usable kubeconfig");
        Self {
            name: "real",
            client: Client::try_from(config).expect("a client"),
            kubeconfig: kubeconfig.to_owned(),
            devcluster: None,
        }
    }

    /// One request (JSON both ways unless `headers` say otherwise); the
    /// answer's status and body (JSON, or the text as a string).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> (u16, Value) {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        self.send_bytes(method, path, headers, bytes).await
    }

    /// [`Server::send`] with a body as it is.
    pub async fn send_bytes(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, Value) {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json");
        for (name, value) in headers {
            request.headers_mut().unwrap().insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_str(value).unwrap(),
            );
        }
        let request = request.body(kube::client::Body::from(body)).unwrap();
        let response = self.client.send(request).await.expect("the server answers");
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("a whole body")
            .to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, body)
    }
}

impl Drop for Server {
    /// Removes the kubeconfig a devcluster was given.
    fn drop(&mut self) {
        if self.devcluster.is_some() {
            let _ = std::fs::remove_file(&self.kubeconfig);
        }
    }
}

/// One answer of a scenario.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub label: String,
    pub status: u16,
    pub body: Value,
}

/// A scenario's requests to one server, in a namespace of its own. Paths
/// and bodies may say `{ns}` for that namespace.
pub struct Session<'a> {
    server: &'a Server,
    pub namespace: String,
    exchanges: Vec<Exchange>,
}

/// How long a watch waits for its next event, and a condition for its truth.
const PATIENCE: Duration = Duration::from_secs(30);

impl<'a> Session<'a> {
    /// Creates `namespace` (the same name on both servers: answers then
    /// name it alike).
    pub async fn start(server: &'a Server, namespace: &str) -> Self {
        let (status, body) = server
            .send(
                Method::POST,
                "/api/v1/namespaces",
                &[],
                Some(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})),
            )
            .await;
        assert_eq!(status, 201, "namespace {namespace} created: {body}");
        Self {
            server,
            namespace: namespace.to_owned(),
            exchanges: Vec::new(),
        }
    }

    fn fill(&self, text: &str) -> String {
        text.replace("{ns}", &self.namespace)
    }

    fn fill_body(&self, body: &Value) -> Value {
        serde_json::from_str(&self.fill(&body.to_string())).unwrap()
    }

    /// Sends a request and records its answer under `label`; returns the body.
    pub async fn request(
        &mut self,
        label: &str,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Value {
        let body = body.map(|b| self.fill_body(b));
        let (status, answer) = self
            .server
            .send(method, &self.fill(path), headers, body.as_ref())
            .await;
        self.record(label, status, answer.clone());
        answer
    }

    /// Sends `body` as it is (malformed, say) and records the answer.
    pub async fn raw(
        &mut self,
        label: &str,
        method: Method,
        path: &str,
        content_type: &str,
        body: &str,
    ) {
        let (status, answer) = self
            .server
            .send_bytes(
                method,
                &self.fill(path),
                &[("content-type", content_type)],
                body.as_bytes().to_vec(),
            )
            .await;
        self.record(label, status, answer);
    }

    /// Records an answer got otherwise (kubectl's output, say).
    pub fn record(&mut self, label: &str, status: u16, body: Value) {
        self.exchanges.push(Exchange {
            label: label.to_owned(),
            status,
            body,
        });
    }

    pub async fn get(&mut self, label: &str, path: &str) -> Value {
        self.request(label, Method::GET, path, &[], None).await
    }

    pub async fn post(&mut self, label: &str, path: &str, body: Value) -> Value {
        self.request(label, Method::POST, path, &[], Some(&body))
            .await
    }

    pub async fn put(&mut self, label: &str, path: &str, body: Value) -> Value {
        self.request(label, Method::PUT, path, &[], Some(&body))
            .await
    }

    pub async fn patch(&mut self, label: &str, path: &str, kind: &str, body: Value) -> Value {
        self.request(
            label,
            Method::PATCH,
            path,
            &[("content-type", kind)],
            Some(&body),
        )
        .await
    }

    pub async fn delete(&mut self, label: &str, path: &str, options: Option<Value>) -> Value {
        self.request(label, Method::DELETE, path, &[], options.as_ref())
            .await
    }

    /// Polls `path` until `done` holds of its answer; records the last one.
    pub async fn eventually(
        &mut self,
        label: &str,
        path: &str,
        done: impl Fn(u16, &Value) -> bool,
    ) -> Value {
        let path = self.fill(path);
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let (status, body) = self.server.send(Method::GET, &path, &[], None).await;
            if done(status, &body) {
                self.record(label, status, body.clone());
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: {label}: {path} never got there; last answer {status} {body}",
                self.server.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Opens a watch (`path` carries its query), runs `writes`, and records
    /// the events it delivers until `enough` holds of them, as one answer:
    /// their types and objects, in order. Bookmarks are left out but for
    /// the one that ends a streaming list's initial events.
    pub async fn watch<F>(
        &mut self,
        label: &str,
        path: &str,
        enough: impl Fn(&[Value]) -> bool,
        writes: F,
    ) where
        F: AsyncFnOnce(&mut Self),
    {
        let request = Request::builder()
            .method(Method::GET)
            .uri(self.fill(path))
            .header(http::header::ACCEPT, "application/json")
            .body(kube::client::Body::empty())
            .unwrap();
        let response = self
            .server
            .client
            .send(request)
            .await
            .expect("the watch opens");
        let status = response.status().as_u16();
        let mut body = response.into_body();
        writes(self).await;
        let mut events = Vec::new();
        let mut pending = Vec::new();
        'read: while !enough(&events) {
            let frame = tokio::time::timeout(PATIENCE, body.frame())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{}: {label}: the watch stopped after {events:?}",
                        self.server.name
                    )
                });
            let Some(frame) = frame else { break };
            let Ok(data) = frame.expect("a watch frame").into_data() else {
                continue;
            };
            pending.extend_from_slice(&data);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let event: Value = serde_json::from_slice(&line)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&line).into_owned()));
                let initial_events_end = event["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"]
                    == "true";
                if event["type"] != "BOOKMARK" || initial_events_end {
                    events.push(event);
                    if enough(&events) {
                        break 'read;
                    }
                }
            }
        }
        self.record(label, status, Value::Array(events));
    }

    /// Counts events: `enough` for [`Session::watch`].
    pub fn events(count: usize) -> impl Fn(&[Value]) -> bool {
        move |events| events.len() >= count
    }

    /// The body of the answer recorded last.
    pub fn last(&self) -> Value {
        self.exchanges
            .last()
            .map(|e| e.body.clone())
            .unwrap_or_default()
    }

    /// The answers, normalised; deletes the namespace.
    pub async fn finish(self) -> Vec<Exchange> {
        let _ = self
            .server
            .send(
                Method::DELETE,
                &format!("/api/v1/namespaces/{}", self.namespace),
                &[],
                None,
            )
            .await;
        let mut normaliser = Normaliser::default();
        self.exchanges
            .into_iter()
            .map(|exchange| Exchange {
                body: normaliser.normalise(exchange.body),
                ..exchange
            })
            .collect()
    }
}
