//! Many Pods from one template: the shared part is checked and written once.

use std::borrow::Cow;

use super::container::write_env;
use super::json::Json;
use super::kinds::POD;
use super::meta::{self, Insert, Pairs};
use super::{Pod, Result, names};
use crate::DesiredChild;

/// A Pod checked and written once, for many Pods that differ only in their
/// name and in labels and environment variables added to each — workers of
/// one job, shards, replicas.
///
/// [`PodTemplate::pod`] makes each Pod. Its manifest is the one
/// [`Pod::build`] makes for the same builder calls, byte for byte, but only
/// the name, the added labels and variables are checked and written for each
/// Pod; the rest is copied from the template.
///
/// ```
/// use policyhost_sdk::build::{Container, Pod};
///
/// let workers = Pod::new("worker")
///     .label("app", "demo")
///     .container(Container::new("worker", "busybox:1.36").command(["sh", "-c", "work"]))
///     .template()?;
/// let children = (0..3)
///     .map(|i| {
///         let index = i.to_string();
///         workers
///             .pod(format!("demo-worker-{i}"))
///             .label("demo/index", index.as_str())
///             .env("INDEX", index.as_str())
///             .build()
///     })
///     .collect::<Result<Vec<_>, _>>()?;
/// let same = Pod::new("demo-worker-2")
///     .label("app", "demo")
///     .label("demo/index", "2")
///     .container(
///         Container::new("worker", "busybox:1.36").command(["sh", "-c", "work"]).env("INDEX", "2"),
///     )
///     .build()?;
/// assert_eq!(children[2], same);
/// # Ok::<(), policyhost_sdk::build::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct PodTemplate<'a> {
    /// The builder, for a Pod that replaces a label or variable of the template.
    pod: Pod<'a>,
    /// The manifest without the name.
    text: String,
    /// Where the name goes.
    name_at: usize,
    /// Where added labels go.
    labels: Insert,
    /// Where added variables go, container by container.
    envs: Vec<Insert>,
}

impl<'a> PodTemplate<'a> {
    pub(super) fn new(pod: Pod<'a>) -> Result<Self> {
        let (meta, spec) = pod.parts();
        meta.check()?;
        spec.check(POD.kind, &meta.name)?;
        let mut json = Json::with_capacity(
            64 + meta.labels.json_len() + meta.annotations.json_len() + spec.json_len(),
        );
        meta::head(&mut json, &POD);
        let (name_at, labels) = meta.write_template(&mut json);
        json.raw(",\"spec\":");
        let mut envs = Vec::with_capacity(spec.containers.len());
        spec.write(&mut json, &mut |insert| envs.push(insert));
        json.byte(b'}');
        Ok(Self {
            text: json.into_string(),
            pod,
            name_at,
            labels,
            envs,
        })
    }

    /// A Pod named `name` (a DNS-1123 subdomain) from this template.
    pub fn pod<'p>(&'p self, name: impl Into<Cow<'p, str>>) -> TemplatePod<'p, 'a> {
        TemplatePod {
            template: self,
            name: name.into(),
            labels: Pairs::default(),
            env: Pairs::default(),
        }
    }
}

/// One Pod of a [`PodTemplate`]: its name, and labels and environment
/// variables of its own.
#[derive(Debug, Clone)]
#[must_use]
pub struct TemplatePod<'p, 'a> {
    template: &'p PodTemplate<'a>,
    name: Cow<'p, str>,
    labels: Pairs<'p>,
    env: Pairs<'p>,
}

impl<'p> TemplatePod<'p, '_> {
    /// Sets a label on this Pod (after the template's; a key the template
    /// sets too takes this value).
    pub fn label(mut self, key: impl Into<Cow<'p, str>>, value: impl Into<Cow<'p, str>>) -> Self {
        self.labels.set(key.into(), value.into());
        self
    }

    /// Sets an environment variable in every container of this Pod (after
    /// the template's; a variable the template sets too takes this value).
    pub fn env(mut self, name: impl Into<Cow<'p, str>>, value: impl Into<Cow<'p, str>>) -> Self {
        self.env.set(name.into(), value.into());
        self
    }

    /// Checks the name and what was added, and writes the manifest.
    ///
    /// # Errors
    ///
    /// [`super::Error::Invalid`] naming the invalid name, label or variable.
    pub fn build(self) -> Result<DesiredChild> {
        let template = self.template;
        names::check_name(&POD, &self.name)?;
        self.labels.check_labels()?;
        for (name, _) in &self.env.0 {
            names::check_env_name(name)?;
        }
        let (meta, spec) = template.pod.parts();
        let replaces = self.labels.0.iter().any(|(key, _)| meta.labels.has(key))
            || self
                .env
                .0
                .iter()
                .any(|(name, _)| spec.containers.iter().any(|c| c.has_env(name)));
        if replaces {
            return self.build_in_full();
        }
        let text = template.text.as_str();
        let env_len = self.env.json_len() * 2 + 12;
        let mut json = Json::with_capacity(
            text.len()
                + self.name.len()
                + 2
                + self.labels.json_len()
                + 12
                + env_len * template.envs.len(),
        );
        json.raw(&text[..template.name_at]);
        json.string(&self.name);
        json.raw(&text[template.name_at..template.labels.at]);
        let mut copied = template.labels.at;
        if !self.labels.is_empty() {
            let labels = self.labels.0.iter().map(|(k, v)| (k, v));
            if template.labels.after_entries {
                json.entries(labels, false);
            } else {
                json.raw(",\"labels\":");
                json.object_of_strings(labels);
            }
        }
        for insert in &template.envs {
            json.raw(&text[copied..insert.at]);
            copied = insert.at;
            if self.env.is_empty() {
                continue;
            }
            let vars = self.env.0.iter().map(|(k, v)| (k, v));
            if insert.after_entries {
                write_env(&mut json, vars, false);
            } else {
                json.raw(",\"env\":[");
                write_env(&mut json, vars, true);
                json.byte(b']');
            }
        }
        json.raw(&text[copied..]);
        Ok(DesiredChild::from_json(
            POD.api_version,
            POD.kind,
            self.name.into_owned(),
            json.into_string(),
        ))
    }

    /// The general path: the template's builder with this Pod's settings.
    fn build_in_full(self) -> Result<DesiredChild> {
        let mut pod: Pod<'_> = self.template.pod.clone();
        let (meta, spec) = pod.parts_mut();
        meta.name = self.name;
        for (key, value) in self.labels.0 {
            meta.labels.set(key, value);
        }
        for container in &mut spec.containers {
            for (name, value) in &self.env.0 {
                container.env_mut().set(name.clone(), value.clone());
            }
        }
        pod.build()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Container, RestartPolicy};
    use super::*;

    type Pair = (&'static str, &'static str);

    fn base<'a>() -> Pod<'a> {
        Pod::new("ignored")
            .label("app", "demo")
            .label("tier", "batch")
            .annotation("note", "say \"hi\"")
            .restart_policy(RestartPolicy::OnFailure)
            .service_account("runner")
            .container(
                Container::new("main", "busybox:1.36")
                    .command(["sh", "-c", "echo \"$INDEX\""])
                    .env("MODE", "fast")
                    .request("cpu", "100m"),
            )
            .container(Container::new("side", "helper:2").port("http", 8080))
    }

    #[test]
    fn a_template_pod_is_byte_for_byte_the_built_pod() {
        let template = base().template().unwrap();
        let cases: [(&[Pair], &[Pair]); 5] = [
            (&[], &[]),
            (&[("demo/index", "3")], &[]),
            (&[], &[("INDEX", "3")]),
            (
                &[("demo/index", "3"), ("demo/retry", "0")],
                &[("INDEX", "3"), ("NOTE", "a\tb")],
            ),
            // Replacing what the template set takes the general path.
            (&[("tier", "web")], &[("MODE", "slow")]),
        ];
        for (labels, env) in cases {
            let mut from_template = template.pod("demo-worker-3");
            let mut built = base();
            let mut containers = vec![
                Container::new("main", "busybox:1.36")
                    .command(["sh", "-c", "echo \"$INDEX\""])
                    .env("MODE", "fast")
                    .request("cpu", "100m"),
                Container::new("side", "helper:2").port("http", 8080),
            ];
            for &(key, value) in labels {
                from_template = from_template.label(key, value);
                built = built.label(key, value);
            }
            for &(name, value) in env {
                from_template = from_template.env(name, value);
                containers = containers.into_iter().map(|c| c.env(name, value)).collect();
            }
            let (_, spec) = built.parts_mut();
            spec.containers = containers;
            let (meta, _) = built.parts_mut();
            meta.name = "demo-worker-3".into();
            let expected = built.build().unwrap();
            assert_eq!(
                from_template.build().unwrap(),
                expected,
                "{labels:?} {env:?}"
            );
        }
    }

    #[test]
    fn a_template_without_labels_or_env_gets_them_per_pod() {
        let template = Pod::new("x")
            .container(Container::new("c", "img"))
            .template()
            .unwrap();
        let child = template
            .pod("p-0")
            .label("i", "0")
            .env("I", "0")
            .build()
            .unwrap();
        let expected = Pod::new("p-0")
            .label("i", "0")
            .container(Container::new("c", "img").env("I", "0"))
            .build()
            .unwrap();
        assert_eq!(child, expected);
        let plain = template.pod("p-1").build().unwrap();
        assert_eq!(
            plain.manifest,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p-1"},"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"img"}]}}"#
        );
    }

    #[test]
    fn template_pods_check_what_they_add() {
        let template = base().template().unwrap();
        assert!(template.pod("Upper").build().is_err());
        assert!(template.pod("p").label("bad key", "v").build().is_err());
        assert!(template.pod("p").label("k", "bad value").build().is_err());
        assert!(template.pod("p").env("1X", "v").build().is_err());
    }

    #[test]
    fn a_template_is_checked_when_made() {
        assert!(Pod::new("p").template().is_err());
        assert!(
            Pod::new("p")
                .label("a b", "x")
                .container(Container::new("c", "i"))
                .template()
                .is_err()
        );
    }
}
