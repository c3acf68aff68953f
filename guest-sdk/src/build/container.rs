//! A container of a Pod or Job.

use std::borrow::Cow;

use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

use super::meta::Pairs;
use super::{Result, names};

/// A container: image, command, args, environment and resources.
///
/// Text arguments are `&str` or `String` (anything `Into<Cow<str>>`):
/// borrowed text is not copied until the manifest is serialized.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Container<'a> {
    name: Cow<'a, str>,
    image: Cow<'a, str>,
    command: Vec<Cow<'a, str>>,
    args: Vec<Cow<'a, str>>,
    env: Pairs<'a>,
    requests: Pairs<'a>,
    limits: Pairs<'a>,
    working_dir: Option<Cow<'a, str>>,
    ports: Vec<(Cow<'a, str>, u16)>,
}

impl<'a> Container<'a> {
    /// A container named `name` (a DNS-1123 label) running `image`.
    pub fn new(name: impl Into<Cow<'a, str>>, image: impl Into<Cow<'a, str>>) -> Self {
        Self {
            name: name.into(),
            image: image.into(),
            command: Vec::new(),
            args: Vec::new(),
            env: Pairs::default(),
            requests: Pairs::default(),
            limits: Pairs::default(),
            working_dir: None,
            ports: Vec::new(),
        }
    }

    /// The entrypoint (`command`), replacing the image's.
    pub fn command<I: IntoIterator<Item = S>, S: Into<Cow<'a, str>>>(mut self, command: I) -> Self {
        self.command = command.into_iter().map(Into::into).collect();
        self
    }

    /// The arguments (`args`).
    pub fn args<I: IntoIterator<Item = S>, S: Into<Cow<'a, str>>>(mut self, args: I) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, name: impl Into<Cow<'a, str>>, value: impl Into<Cow<'a, str>>) -> Self {
        self.env.set(name.into(), value.into());
        self
    }

    /// Requests a resource, e.g. `("cpu", "100m")`, `("memory", "128Mi")`.
    pub fn request(
        mut self,
        resource: impl Into<Cow<'a, str>>,
        quantity: impl Into<Cow<'a, str>>,
    ) -> Self {
        self.requests.set(resource.into(), quantity.into());
        self
    }

    /// Limits a resource, e.g. `("memory", "256Mi")`.
    pub fn limit(
        mut self,
        resource: impl Into<Cow<'a, str>>,
        quantity: impl Into<Cow<'a, str>>,
    ) -> Self {
        self.limits.set(resource.into(), quantity.into());
        self
    }

    /// The working directory.
    pub fn working_dir(mut self, dir: impl Into<Cow<'a, str>>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// Exposes a TCP port under a name (a DNS-1123 label of at most 15 characters).
    pub fn port(mut self, name: impl Into<Cow<'a, str>>, port: u16) -> Self {
        self.ports.push((name.into(), port));
        self
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn check(&self) -> Result<()> {
        names::check_label("container name", &self.name)?;
        if self.image.trim().is_empty() {
            return Err(super::Error::Invalid {
                what: "container image",
                value: self.image.clone().into_owned(),
                reason: "must not be empty",
            });
        }
        for (name, _) in &self.env.0 {
            names::check_env_name(name)?;
        }
        for (resource, quantity) in self.requests.0.iter().chain(&self.limits.0) {
            names::check_key("resource name", resource)?;
            names::check_quantity(quantity)?;
        }
        for (name, port) in &self.ports {
            names::check_label("container port name", name)?;
            if name.len() > 15 {
                return Err(super::Error::Invalid {
                    what: "container port name",
                    value: name.clone().into_owned(),
                    reason: "must be at most 15 characters",
                });
            }
            if *port == 0 {
                return Err(super::Error::Invalid {
                    what: "container port",
                    value: port.to_string(),
                    reason: "must be between 1 and 65535",
                });
            }
        }
        Ok(())
    }
}

struct Env<'p, 'a>(&'p Pairs<'a>);

impl Serialize for Env<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.0.iter().map(|(name, value)| EnvVar {
            name: name.as_ref(),
            value: value.as_ref(),
        }))
    }
}

#[derive(Serialize)]
struct EnvVar<'a> {
    name: &'a str,
    value: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Port<'a> {
    name: &'a str,
    container_port: u16,
    protocol: &'static str,
}

#[derive(Serialize)]
struct Resources<'p, 'a> {
    #[serde(skip_serializing_if = "Pairs::is_empty")]
    requests: &'p Pairs<'a>,
    #[serde(skip_serializing_if = "Pairs::is_empty")]
    limits: &'p Pairs<'a>,
}

impl Serialize for Container<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("Container", 8)?;
        out.serialize_field("name", &self.name)?;
        out.serialize_field("image", &self.image)?;
        if !self.command.is_empty() {
            out.serialize_field("command", &self.command)?;
        }
        if !self.args.is_empty() {
            out.serialize_field("args", &self.args)?;
        }
        if !self.env.is_empty() {
            out.serialize_field("env", &Env(&self.env))?;
        }
        if !self.requests.is_empty() || !self.limits.is_empty() {
            out.serialize_field(
                "resources",
                &Resources {
                    requests: &self.requests,
                    limits: &self.limits,
                },
            )?;
        }
        if let Some(dir) = &self.working_dir {
            out.serialize_field("workingDir", dir)?;
        }
        if !self.ports.is_empty() {
            let ports: Vec<Port<'_>> = self
                .ports
                .iter()
                .map(|(name, port)| Port {
                    name,
                    container_port: *port,
                    protocol: "TCP",
                })
                .collect();
            out.serialize_field("ports", &ports)?;
        }
        out.end()
    }
}
