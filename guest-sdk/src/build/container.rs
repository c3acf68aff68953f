//! A container of a Pod or Job.

use std::borrow::Cow;

use super::json::Json;
use super::kinds::{PORT_NAME_LENGTH_RULE, PORT_NAME_MAX_LENGTH, PORT_PROTOCOL};
use super::meta::{Insert, Pairs};
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
    /// `(volume, path)`: each volume of the Pod the container mounts, and where.
    mounts: Vec<(Cow<'a, str>, Cow<'a, str>)>,
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
            mounts: Vec::new(),
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

    /// Mounts the Pod's volume `volume` (see [`Pod::volume_claim`](super::Pod::volume_claim))
    /// at `path`, an absolute path without `:`.
    pub fn mount(mut self, volume: impl Into<Cow<'a, str>>, path: impl Into<Cow<'a, str>>) -> Self {
        self.mounts.push((volume.into(), path.into()));
        self
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The volumes it mounts, by name; its Pod checks they are declared.
    pub(crate) fn mounted_volumes(&self) -> impl Iterator<Item = &str> {
        self.mounts.iter().map(|(volume, _)| volume.as_ref())
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
            if name.len() > PORT_NAME_MAX_LENGTH {
                return Err(super::Error::Invalid {
                    what: "container port name",
                    value: name.clone().into_owned(),
                    reason: PORT_NAME_LENGTH_RULE,
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
        for (i, (_, path)) in self.mounts.iter().enumerate() {
            // The kubelet splits `path:mode` on the colon.
            let reason = if !path.starts_with('/') || path.contains(':') {
                "must be an absolute path without ':'"
            } else if self.mounts[..i].iter().any(|(_, other)| other == path) {
                // kube-apiserver refuses two mounts at one place.
                "must be unique"
            } else {
                continue;
            };
            return Err(super::Error::Invalid {
                what: "mount path",
                value: path.clone().into_owned(),
                reason,
            });
        }
        Ok(())
    }
}

impl<'a> Container<'a> {
    /// Writes the container as JSON; `env_insert` learns where further
    /// environment variables would go (see [`super::PodTemplate`]).
    pub(crate) fn write(&self, json: &mut Json, env_insert: &mut impl FnMut(Insert)) {
        json.raw("{\"name\":");
        json.string(&self.name);
        json.raw(",\"image\":");
        json.string(&self.image);
        if !self.command.is_empty() {
            json.raw(",\"command\":");
            json.array_of_strings(&self.command);
        }
        if !self.args.is_empty() {
            json.raw(",\"args\":");
            json.array_of_strings(&self.args);
        }
        if self.env.is_empty() {
            env_insert(Insert {
                at: json.len(),
                after_entries: false,
            });
        } else {
            json.raw(",\"env\":[");
            write_env(json, self.env.0.iter().map(|(k, v)| (k, v)), true);
            env_insert(Insert {
                at: json.len(),
                after_entries: true,
            });
            json.byte(b']');
        }
        if !self.requests.is_empty() || !self.limits.is_empty() {
            json.raw(",\"resources\":{");
            Pairs::write_members(
                json,
                true,
                [
                    ("\"requests\":", &self.requests),
                    ("\"limits\":", &self.limits),
                ],
            );
            json.byte(b'}');
        }
        if let Some(dir) = &self.working_dir {
            json.raw(",\"workingDir\":");
            json.string(dir);
        }
        if !self.ports.is_empty() {
            json.raw(",\"ports\":[");
            for (i, (name, port)) in self.ports.iter().enumerate() {
                if i > 0 {
                    json.byte(b',');
                }
                json.raw("{\"name\":");
                json.string(name);
                json.raw(",\"containerPort\":");
                json.number(u64::from(*port));
                json.raw(",\"protocol\":");
                json.string(PORT_PROTOCOL);
                json.byte(b'}');
            }
            json.byte(b']');
        }
        if !self.mounts.is_empty() {
            json.raw(",\"volumeMounts\":[");
            for (i, (volume, path)) in self.mounts.iter().enumerate() {
                if i > 0 {
                    json.byte(b',');
                }
                json.raw("{\"name\":");
                json.string(volume);
                json.raw(",\"mountPath\":");
                json.string(path);
                json.byte(b'}');
            }
            json.byte(b']');
        }
        json.byte(b'}');
    }

    pub(crate) fn env_mut(&mut self) -> &mut Pairs<'a> {
        &mut self.env
    }

    /// Whether the variable `name` is set.
    pub(crate) fn has_env(&self, name: &str) -> bool {
        self.env.has(name)
    }

    /// Bytes the container takes as JSON without escapes, roughly.
    pub(crate) fn json_len(&self) -> usize {
        let list = |items: &[Cow<'_, str>]| items.iter().map(|s| s.len() + 3).sum::<usize>() + 12;
        64 + self.name.len()
            + self.image.len()
            + list(&self.command)
            + list(&self.args)
            + self.env.json_len() * 2
            + self.requests.json_len()
            + self.limits.json_len()
            + self.working_dir.as_ref().map_or(0, |d| d.len() + 16)
            + self.ports.len() * 64
            + self
                .mounts
                .iter()
                .map(|(volume, path)| volume.len() + path.len() + 32)
                .sum::<usize>()
    }
}

/// Writes `{"name":..,"value":..}` entries of an `env` list.
pub(crate) fn write_env<K: AsRef<str>, V: AsRef<str>>(
    json: &mut Json,
    vars: impl IntoIterator<Item = (K, V)>,
    mut first: bool,
) {
    for (name, value) in vars {
        if !first {
            json.byte(b',');
        }
        first = false;
        json.raw("{\"name\":");
        json.string(name.as_ref());
        json.raw(",\"value\":");
        json.string(value.as_ref());
        json.byte(b'}');
    }
}
