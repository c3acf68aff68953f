//! A core `v1` Service.

use std::borrow::Cow;

use super::json::Json;
use super::kinds::{PORT_PROTOCOL, SERVICE, SERVICE_TYPE};
use super::meta::{self, Meta, Pairs};
use super::{Error, Result, names};
use crate::DesiredChild;

/// A core `v1` Service of type ClusterIP (or headless) selecting Pods by label.
///
/// ```
/// use policyhost_sdk::build::Service;
///
/// let service = Service::new("demo").selector("app", "demo").port("http", 80, 8080).build()?;
/// assert_eq!(service.kind, "Service");
/// # Ok::<(), policyhost_sdk::build::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Service<'a> {
    meta: Meta<'a>,
    selector: Pairs<'a>,
    ports: Vec<ServicePort<'a>>,
    headless: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ServicePort<'a> {
    name: Cow<'a, str>,
    port: u16,
    target_port: u16,
    protocol: &'static str,
}

impl<'a> Service<'a> {
    /// A Service named `name` (a DNS-1035 label: starts with a letter).
    pub fn new(name: impl Into<Cow<'a, str>>) -> Self {
        Self {
            meta: Meta::new(name.into()),
            selector: Pairs::default(),
            ports: Vec::new(),
            headless: false,
        }
    }

    /// Selects Pods carrying this label.
    pub fn selector(
        mut self,
        key: impl Into<Cow<'a, str>>,
        value: impl Into<Cow<'a, str>>,
    ) -> Self {
        self.selector.set(key.into(), value.into());
        self
    }

    /// Exposes TCP `port`, forwarded to the Pods' `target_port`.
    pub fn port(mut self, name: impl Into<Cow<'a, str>>, port: u16, target_port: u16) -> Self {
        self.ports.push(ServicePort {
            name: name.into(),
            port,
            target_port,
            protocol: PORT_PROTOCOL,
        });
        self
    }

    /// Makes the Service headless (`clusterIP: None`): DNS names for each Pod.
    pub fn headless(mut self) -> Self {
        self.headless = true;
        self
    }

    /// Checks the Service and writes its manifest.
    ///
    /// # Errors
    ///
    /// [`Error`] for a bad name, label, selector or port, or a Service with
    /// no ports.
    pub fn build(self) -> Result<DesiredChild> {
        names::check_name(&SERVICE, &self.meta.name)?;
        self.meta.check()?;
        self.selector.check_labels()?;
        if self.ports.is_empty() && !self.headless {
            return Err(Error::Invalid {
                what: "Service",
                value: self.meta.name.clone().into_owned(),
                reason: "needs at least one port unless headless",
            });
        }
        for (i, port) in self.ports.iter().enumerate() {
            names::check_label("Service port name", &port.name)?;
            if port.port == 0 || port.target_port == 0 {
                return Err(Error::Invalid {
                    what: "Service port",
                    value: port.name.clone().into_owned(),
                    reason: "port and target port must be between 1 and 65535",
                });
            }
            if self.ports[..i].iter().any(|p| p.name == port.name) {
                return Err(Error::Invalid {
                    what: "Service port name",
                    value: port.name.clone().into_owned(),
                    reason: "must be unique within the Service",
                });
            }
        }
        let mut json = Json::with_capacity(
            160 + self.meta.name.len()
                + self.meta.labels.json_len()
                + self.meta.annotations.json_len()
                + self.selector.json_len()
                + self.ports.len() * 80,
        );
        meta::head(&mut json, &SERVICE);
        self.meta.write(&mut json);
        json.raw(",\"spec\":{\"type\":");
        json.string(SERVICE_TYPE);
        if self.headless {
            json.raw(",\"clusterIP\":\"None\"");
        }
        if !self.selector.is_empty() {
            json.raw(",\"selector\":");
            self.selector.write(&mut json);
        }
        json.raw(",\"ports\":[");
        for (i, port) in self.ports.iter().enumerate() {
            if i > 0 {
                json.byte(b',');
            }
            json.raw("{\"name\":");
            json.string(&port.name);
            json.raw(",\"port\":");
            json.number(u64::from(port.port));
            json.raw(",\"targetPort\":");
            json.number(u64::from(port.target_port));
            json.raw(",\"protocol\":");
            json.string(port.protocol);
            json.byte(b'}');
        }
        json.raw("]}}");
        Ok(DesiredChild::from_json(
            SERVICE.api_version,
            SERVICE.kind,
            self.meta.name,
            json.into_string(),
        ))
    }
}

meta::metadata_setters!(Service {
    label: "Sets a label on the Service itself.",
    annotation: "Sets an annotation.",
});

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_service_manifest_selects_and_forwards() {
        let child = Service::new("web")
            .selector("app", "web")
            .port("http", 80, 8080)
            .build()
            .unwrap();
        let manifest: serde_json::Value = serde_json::from_str(&child.manifest).unwrap();
        assert_eq!(
            manifest,
            json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "web" },
                    "spec": { "type": "ClusterIP", "selector": { "app": "web" },
                              "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" }] } })
        );
    }

    #[test]
    fn a_headless_service_may_have_no_ports() {
        let child = Service::new("peers")
            .selector("app", "x")
            .headless()
            .build()
            .unwrap();
        let manifest: serde_json::Value = serde_json::from_str(&child.manifest).unwrap();
        assert_eq!(manifest["spec"]["clusterIP"], "None");
    }

    #[test]
    fn invalid_services_are_refused() {
        assert!(Service::new("1web").port("http", 80, 80).build().is_err());
        assert!(Service::new("web").build().is_err());
        assert!(
            Service::new("web")
                .port("http", 80, 80)
                .port("http", 81, 81)
                .build()
                .is_err()
        );
        assert!(Service::new("web").port("http", 0, 80).build().is_err());
    }
}
