//! The cases every SDK agrees on, with the Rust SDK as the reference:
//! builders (`guest-sdk/builders.json`) and params (`guest-sdk/params.json`).
//! The Python and TypeScript SDKs run the same files.
//! `POLICYHOST_BLESS=1` rewrites each builder case's `expected` from what the
//! builders make; review the diff.

#[cfg(test)]
mod cases {
    use std::collections::BTreeMap;
    use std::path::Path;

    use policyhost_sdk::build::{
        AccessMode, BatchJob, ConfigMap, Container, PersistentVolumeClaim, Pod, RestartPolicy,
        Service, UpdateStrategy,
    };
    use policyhost_sdk::testing::JobFixture;
    use policyhost_sdk::{DesiredChild, PolicyError};
    use serde_json::{Value, json};

    fn read(path: &Path) -> Value {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn text(value: &Value) -> String {
        value
            .as_str()
            .unwrap_or_else(|| panic!("not a string: {value}"))
            .to_owned()
    }

    fn number(value: &Value) -> u64 {
        value
            .as_u64()
            .unwrap_or_else(|| panic!("not a number: {value}"))
    }

    /// A builder's calls, `[method, args...]` each.
    fn calls(case: &Value) -> Vec<(String, Vec<Value>)> {
        case["calls"]
            .as_array()
            .unwrap_or_else(|| panic!("no calls: {case}"))
            .iter()
            .map(|call| {
                let call = call
                    .as_array()
                    .unwrap_or_else(|| panic!("not a call: {call}"));
                (text(&call[0]), call[1..].to_vec())
            })
            .collect()
    }

    fn restart(value: &Value) -> RestartPolicy {
        match value.as_str() {
            Some("Always") => RestartPolicy::Always,
            Some("OnFailure") => RestartPolicy::OnFailure,
            Some("Never") => RestartPolicy::Never,
            _ => panic!("not a restart policy: {value}"),
        }
    }

    fn strategy(value: &Value) -> UpdateStrategy {
        match value.as_str() {
            Some("InPlace") => UpdateStrategy::InPlace,
            Some("Recreate") => UpdateStrategy::Recreate,
            Some("RecreateAlways") => UpdateStrategy::RecreateAlways,
            Some("OnDelete") => UpdateStrategy::OnDelete,
            _ => panic!("not an update strategy: {value}"),
        }
    }

    fn access_mode(value: &Value) -> AccessMode {
        match value.as_str() {
            Some("ReadWriteOnce") => AccessMode::ReadWriteOnce,
            Some("ReadOnlyMany") => AccessMode::ReadOnlyMany,
            Some("ReadWriteMany") => AccessMode::ReadWriteMany,
            Some("ReadWriteOncePod") => AccessMode::ReadWriteOncePod,
            _ => panic!("not an access mode: {value}"),
        }
    }

    fn container(spec: &Value) -> Container<'static> {
        let mut c = Container::new(text(&spec["name"]), text(&spec["image"]));
        for (method, args) in calls(spec) {
            let strings = || {
                args[0]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(text)
                    .collect::<Vec<_>>()
            };
            c = match method.as_str() {
                "command" => c.command(strings()),
                "args" => c.args(strings()),
                "env" => c.env(text(&args[0]), text(&args[1])),
                "request" => c.request(text(&args[0]), text(&args[1])),
                "limit" => c.limit(text(&args[0]), text(&args[1])),
                "working_dir" => c.working_dir(text(&args[0])),
                "port" => c.port(text(&args[0]), u16::try_from(number(&args[1])).unwrap()),
                "mount" => c.mount(text(&args[0]), text(&args[1])),
                other => panic!("no Container method {other}"),
            };
        }
        c
    }

    /// Applies the metadata calls every builder has; `None` for any other.
    macro_rules! metadata {
        ($builder:expr, $method:expr, $args:expr) => {
            match $method {
                "label" => Some($builder.label(text(&$args[0]), text(&$args[1]))),
                "annotation" => Some($builder.annotation(text(&$args[0]), text(&$args[1]))),
                "update_strategy" => Some($builder.update_strategy(strategy(&$args[0]))),
                _ => None,
            }
        };
    }

    fn pod(name: String, case: &Value) -> Pod<'static> {
        let mut pod = Pod::new(name);
        for (method, args) in calls(case) {
            pod = match metadata!(pod.clone(), method.as_str(), args) {
                Some(pod) => pod,
                None => match method.as_str() {
                    "restart_policy" => pod.restart_policy(restart(&args[0])),
                    "service_account" => pod.service_account(text(&args[0])),
                    "node_selector" => pod.node_selector(text(&args[0]), text(&args[1])),
                    "active_deadline_seconds" => pod.active_deadline_seconds(number(&args[0])),
                    "container" => pod.container(container(&args[0])),
                    "volume_claim" => pod.volume_claim(text(&args[0]), text(&args[1])),
                    other => panic!("no Pod method {other}"),
                },
            };
        }
        pod
    }

    fn batch_job(name: String, case: &Value) -> BatchJob<'static> {
        let mut job = BatchJob::new(name);
        for (method, args) in calls(case) {
            let n = || u32::try_from(number(&args[0])).unwrap();
            job = match metadata!(job.clone(), method.as_str(), args) {
                Some(job) => job,
                None => match method.as_str() {
                    "restart_policy" => job.restart_policy(restart(&args[0])),
                    "service_account" => job.service_account(text(&args[0])),
                    "backoff_limit" => job.backoff_limit(n()),
                    "completions" => job.completions(n()),
                    "parallelism" => job.parallelism(n()),
                    "active_deadline_seconds" => job.active_deadline_seconds(number(&args[0])),
                    "ttl_seconds_after_finished" => job.ttl_seconds_after_finished(n()),
                    "container" => job.container(container(&args[0])),
                    "volume_claim" => job.volume_claim(text(&args[0]), text(&args[1])),
                    other => panic!("no BatchJob method {other}"),
                },
            };
        }
        job
    }

    fn service(name: String, case: &Value) -> Service<'static> {
        let mut service = Service::new(name);
        for (method, args) in calls(case) {
            let port = |i: usize| u16::try_from(number(&args[i])).unwrap();
            service = match metadata!(service.clone(), method.as_str(), args) {
                Some(service) => service,
                None => match method.as_str() {
                    "selector" => service.selector(text(&args[0]), text(&args[1])),
                    "port" => service.port(text(&args[0]), port(1), port(2)),
                    "headless" => service.headless(),
                    other => panic!("no Service method {other}"),
                },
            };
        }
        service
    }

    fn config_map(name: String, case: &Value) -> ConfigMap<'static> {
        let mut map = ConfigMap::new(name);
        for (method, args) in calls(case) {
            map = match metadata!(map.clone(), method.as_str(), args) {
                Some(map) => map,
                None => match method.as_str() {
                    "data" => map.data(text(&args[0]), text(&args[1])),
                    other => panic!("no ConfigMap method {other}"),
                },
            };
        }
        map
    }

    fn persistent_volume_claim(name: String, case: &Value) -> PersistentVolumeClaim<'static> {
        let mut claim = PersistentVolumeClaim::new(name);
        for (method, args) in calls(case) {
            claim = match metadata!(claim.clone(), method.as_str(), args) {
                Some(claim) => claim,
                None => match method.as_str() {
                    "storage" => claim.storage(text(&args[0])),
                    "access_mode" => claim.access_mode(access_mode(&args[0])),
                    "storage_class" => claim.storage_class(text(&args[0])),
                    other => panic!("no PersistentVolumeClaim method {other}"),
                },
            };
        }
        claim
    }

    fn template_pod(case: &Value) -> policyhost_sdk::build::Result<DesiredChild> {
        let template = pod(text(&case["name"]), case).template()?;
        let spec = &case["pod"];
        let mut one = template.pod(text(&spec["name"]));
        for (method, args) in calls(spec) {
            one = match method.as_str() {
                "label" => one.label(text(&args[0]), text(&args[1])),
                "env" => one.env(text(&args[0]), text(&args[1])),
                other => panic!("no TemplatePod method {other}"),
            };
        }
        one.build()
    }

    fn make(case: &Value) -> Value {
        let name = text(&case["name"]);
        let built = match case["builder"].as_str() {
            Some("Pod") => pod(name, case).build(),
            Some("BatchJob") => batch_job(name, case).build(),
            Some("Service") => service(name, case).build(),
            Some("ConfigMap") => config_map(name, case).build(),
            Some("PersistentVolumeClaim") => persistent_volume_claim(name, case).build(),
            Some("PodTemplate") => template_pod(case),
            _ => panic!("no builder {}", case["builder"]),
        };
        match built {
            Ok(child) => {
                json!({ "manifest": serde_json::from_str::<Value>(&child.manifest).unwrap() })
            }
            Err(error) => json!({ "error": error.to_string() }),
        }
    }

    fn shared(path: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
    }

    #[test]
    fn builders_make_what_every_sdk_expects() {
        let path = shared("builders.json");
        let mut document = read(&path);
        let bless = std::env::var_os("POLICYHOST_BLESS").is_some_and(|v| v == "1");
        let mut mismatches = Vec::new();
        for case in document["cases"].as_array_mut().unwrap() {
            let actual = make(case);
            if case["expected"] == actual {
                continue;
            }
            if bless {
                case["expected"] = actual;
            } else {
                mismatches.push(format!(
                    "{}: expected {}, made {actual}",
                    case["description"], case["expected"]
                ));
            }
        }
        if bless {
            let text = serde_json::to_string_pretty(&document).unwrap() + "\n";
            std::fs::write(&path, text).unwrap();
        }
        assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    }

    /// The struct `guest-sdk/params.json` describes.
    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    #[allow(dead_code, reason = "only read to be refused or accepted")]
    struct Example {
        replicas: u32,
        #[serde(default)]
        backoff_limit: u32,
        #[serde(default)]
        names: Vec<String>,
        #[serde(default)]
        labels: BTreeMap<String, String>,
        #[serde(default)]
        verbose: Option<bool>,
        #[serde(default)]
        limit: Option<Limit>,
    }

    /// A struct inside `Example`.
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code, reason = "only read to be refused or accepted")]
    struct Limit {
        cpu: String,
    }

    #[test]
    fn params_are_read_or_refused_as_every_sdk_expects() {
        let document = read(&shared("params.json"));
        for case in document["cases"].as_array().unwrap() {
            let mut job = JobFixture::new("j").to_job();
            job.params_json = text(&case["params"]);
            let refusal = match job.params::<Example>() {
                Ok(_) => Value::Null,
                Err(PolicyError::InvalidParams(message)) => Value::String(message),
                Err(other) => panic!("{other:?}"),
            };
            assert_eq!(refusal, case["refusal"], "{}", case["params"]);
        }
    }
}
