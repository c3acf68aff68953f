//! The `kinds` module of every SDK is generated from `guest-sdk/kinds.json`,
//! the one description of the kinds of child the builders write.
//! `POLICYHOST_BLESS=1` rewrites the three modules; otherwise this test fails
//! while one of them is not what the description generates.

#[cfg(test)]
mod generator {
    use std::fmt::Write as _;
    use std::path::{Path, PathBuf};

    use serde::Deserialize;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Description {
        #[allow(dead_code, reason = "read by people, not by the generator")]
        description: String,
        kinds: Vec<Kind>,
        default_restart_policy: String,
        port: Port,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Kind {
        /// camelCase; the constants are its SCREAMING_SNAKE_CASE.
        id: String,
        api_version: String,
        kind: String,
        /// A rule of the names crate, in snake_case.
        name_rule: String,
        #[serde(default)]
        restart_policies: Vec<String>,
        service_type: Option<String>,
        /// The access mode written when the policy sets none.
        access_mode: Option<String>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Port {
        protocol: String,
        name_max_length: usize,
    }

    impl Port {
        /// The rule an error states for a longer port name.
        fn name_length_rule(&self) -> String {
            format!("must be at most {} characters", self.name_max_length)
        }
    }

    const GENERATED: &str = "Generated from guest-sdk/kinds.json by \
        `POLICYHOST_BLESS=1 cargo test -p policyhost-sdk --test kinds`: edit that file, not this one.";

    const SUMMARY: &str = "What the builders write for each kind of child: its API version and kind, \
        the rule of its name, the restart policies it accepts, and the values written when the policy sets none.";

    fn constant(id: &str) -> String {
        let mut out = String::new();
        for c in id.chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        out
    }

    fn camel(snake: &str) -> String {
        let mut parts = snake.split('_');
        let mut out = parts.next().unwrap_or_default().to_owned();
        for part in parts {
            let mut chars = part.chars();
            if let Some(first) = chars.next() {
                out.push(first.to_ascii_uppercase());
                out.extend(chars);
            }
        }
        out
    }

    /// The rule an error states for a value outside `allowed`.
    fn rule_text(allowed: &[String]) -> String {
        format!("must be {}", allowed.join(" or "))
    }

    /// Text as a string literal of Rust, Python and TypeScript alike.
    fn quoted(text: &str) -> String {
        serde_json::to_string(text).expect("a string serialises")
    }

    /// `text` cut into lines of at most `width` characters, each after `prefix`.
    fn wrapped(text: &str, prefix: &str, width: usize) -> String {
        let mut out = String::new();
        let mut line = String::new();
        for word in text.split_whitespace() {
            if !line.is_empty() && prefix.len() + line.len() + 1 + word.len() > width {
                writeln!(out, "{prefix}{line}").unwrap();
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        writeln!(out, "{prefix}{line}").unwrap();
        out
    }

    /// A one-line `const` item as rustfmt lays it out: past 100 characters,
    /// the value goes on a line of its own.
    fn rustfmt_wrap(item: &str) -> String {
        match item.split_once(" = ") {
            Some((head, value)) if item.len() > 100 && !item.contains('\n') => {
                format!("{head} =\n    {value}")
            }
            _ => item.to_owned(),
        }
    }

    /// A constant of every SDK's module.
    enum Value<'a> {
        Kind(&'a Kind),
        Text(String),
        Count(usize),
        /// A variant of an enum of the Rust SDK (`RestartPolicy`,
        /// `AccessMode`); a string in Python and TypeScript.
        Variant(&'static str, &'a str),
        /// A list of variants of one enum.
        Variants(&'static str, &'a [String]),
    }

    /// The constants the description defines, in groups set apart by a
    /// blank line: one group per kind, then the shared values.
    fn constants(d: &Description) -> Vec<Vec<(String, Value<'_>)>> {
        let mut groups: Vec<Vec<(String, Value<'_>)>> = d
            .kinds
            .iter()
            .map(|kind| {
                let id = constant(&kind.id);
                let mut group = vec![(id.clone(), Value::Kind(kind))];
                if !kind.restart_policies.is_empty() {
                    group.push((
                        format!("{id}_RESTART_POLICIES"),
                        Value::Variants("RestartPolicy", &kind.restart_policies),
                    ));
                    group.push((
                        format!("{id}_RESTART_POLICY_RULE"),
                        Value::Text(rule_text(&kind.restart_policies)),
                    ));
                }
                if let Some(service_type) = &kind.service_type {
                    group.push((format!("{id}_TYPE"), Value::Text(service_type.clone())));
                }
                if let Some(mode) = &kind.access_mode {
                    group.push((
                        format!("{id}_ACCESS_MODE"),
                        Value::Variant("AccessMode", mode),
                    ));
                }
                group
            })
            .collect();
        groups.push(vec![
            (
                "DEFAULT_RESTART_POLICY".into(),
                Value::Variant("RestartPolicy", &d.default_restart_policy),
            ),
            ("PORT_PROTOCOL".into(), Value::Text(d.port.protocol.clone())),
            (
                "PORT_NAME_MAX_LENGTH".into(),
                Value::Count(d.port.name_max_length),
            ),
            (
                "PORT_NAME_LENGTH_RULE".into(),
                Value::Text(d.port.name_length_rule()),
            ),
        ]);
        groups
    }

    /// `header`, then every constant as `write` writes it in one language.
    fn module(d: &Description, header: String, write: fn(&str, &Value<'_>) -> String) -> String {
        let mut out = header;
        for group in constants(d) {
            out.push('\n');
            for (name, value) in &group {
                out += &write(name, value);
                out.push('\n');
            }
        }
        out
    }

    fn rust(d: &Description) -> String {
        let mut header = wrapped(GENERATED, "// ", 80);
        header.push('\n');
        header += &wrapped(SUMMARY, "//! ", 80);
        header += "\nuse policyhost_names::Verdict;\n\nuse super::{AccessMode, RestartPolicy};\n\n\
                   /// A kind of child, as its builder writes it.\n\
                   pub(crate) struct Kind {\n    \
                       pub(crate) api_version: &'static str,\n    \
                       pub(crate) kind: &'static str,\n    \
                       /// What an error calls its name, e.g. `Pod name`.\n    \
                       pub(crate) name_what: &'static str,\n    \
                       pub(crate) name_rule: fn(&str) -> Verdict,\n\
                   }\n";
        module(d, header, |name, value| {
            rustfmt_wrap(&match value {
                Value::Kind(kind) => format!(
                    "pub(crate) const {name}: Kind = Kind {{\n    \
                        api_version: {},\n    \
                        kind: {},\n    \
                        name_what: {},\n    \
                        name_rule: policyhost_names::{},\n\
                    }};",
                    quoted(&kind.api_version),
                    quoted(&kind.kind),
                    quoted(&format!("{} name", kind.kind)),
                    kind.name_rule,
                ),
                Value::Text(text) => format!("pub(crate) const {name}: &str = {};", quoted(text)),
                Value::Count(n) => format!("pub(crate) const {name}: usize = {n};"),
                Value::Variant(ty, variant) => {
                    format!("pub(crate) const {name}: {ty} = {ty}::{variant};")
                }
                Value::Variants(ty, variants) => {
                    let variants: Vec<String> =
                        variants.iter().map(|v| format!("{ty}::{v}")).collect();
                    format!(
                        "pub(crate) const {name}: &[{ty}] = &[{}];",
                        variants.join(", ")
                    )
                }
            })
        })
    }

    fn python(d: &Description) -> String {
        let mut header = wrapped(GENERATED, "# ", 88);
        writeln!(
            header,
            "\"\"\"{}\"\"\"\n",
            wrapped(SUMMARY, "", 84).trim_end()
        )
        .unwrap();
        header += "from __future__ import annotations\n\n\
                   from dataclasses import dataclass\n\n\
                   from . import names\n\n\n\
                   @dataclass(frozen=True)\n\
                   class Kind:\n    \
                       \"\"\"A kind of child, as its builder writes it.\"\"\"\n\n    \
                       api_version: str\n    \
                       kind: str\n    \
                       name_what: str\n    \
                       \"\"\"What an error calls its name, e.g. ``Pod name``.\"\"\"\n    \
                       name_rule: names.Rule\n\n";
        module(d, header, |name, value| match value {
            Value::Kind(kind) => format!(
                "{name} = Kind({}, {}, {}, names.{})",
                quoted(&kind.api_version),
                quoted(&kind.kind),
                quoted(&format!("{} name", kind.kind)),
                kind.name_rule,
            ),
            Value::Text(text) => format!("{name} = {}", quoted(text)),
            Value::Count(n) => format!("{name} = {n}"),
            Value::Variant(_, variant) => format!("{name} = {}", quoted(variant)),
            Value::Variants(_, variants) => {
                let mut variants: Vec<String> = variants.iter().map(|v| quoted(v)).collect();
                if variants.len() == 1 {
                    variants.push(String::new()); // a tuple of one: `("Never",)`
                }
                format!("{name} = ({})", variants.join(", "))
            }
        })
    }

    fn typescript(d: &Description) -> String {
        let mut header = wrapped(GENERATED, "// ", 100);
        write!(header, "\n{}", wrapped(SUMMARY, "// ", 100)).unwrap();
        header += "\nimport * as names from \"./names.js\";\n\n\
                   /** A kind of child, as its builder writes it. */\n\
                   export interface Kind {\n  \
                       readonly apiVersion: string;\n  \
                       readonly kind: string;\n  \
                       /** What an error calls its name, e.g. `Pod name`. */\n  \
                       readonly nameWhat: string;\n  \
                       readonly nameRule: names.Rule;\n\
                   }\n";
        module(d, header, |name, value| match value {
            Value::Kind(kind) => format!(
                "export const {name}: Kind = {{\n  \
                    apiVersion: {},\n  \
                    kind: {},\n  \
                    nameWhat: {},\n  \
                    nameRule: names.{},\n\
                }};",
                quoted(&kind.api_version),
                quoted(&kind.kind),
                quoted(&format!("{} name", kind.kind)),
                camel(&kind.name_rule),
            ),
            Value::Text(text) => format!("export const {name} = {};", quoted(text)),
            Value::Count(n) => format!("export const {name} = {n};"),
            Value::Variant(_, variant) => format!("export const {name} = {};", quoted(variant)),
            Value::Variants(_, variants) => {
                let variants: Vec<String> = variants.iter().map(|v| quoted(v)).collect();
                format!(
                    "export const {name}: readonly string[] = [{}];",
                    variants.join(", ")
                )
            }
        })
    }

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn every_sdks_kinds_module_is_what_the_description_generates() {
        let path = root().join("guest-sdk/kinds.json");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let description: Description =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let modules = [
            ("guest-sdk/src/build/kinds.rs", rust(&description)),
            (
                "guest-sdk-python/src/policyhost_sdk/kinds.py",
                python(&description),
            ),
            (
                "guest-sdk-typescript/src/kinds.ts",
                typescript(&description),
            ),
        ];
        let bless = std::env::var_os("POLICYHOST_BLESS").is_some_and(|v| v == "1");
        let mut stale = Vec::new();
        for (module, generated) in modules {
            let path = root().join(module);
            if bless {
                std::fs::write(&path, &generated).unwrap_or_else(|e| panic!("{module}: {e}"));
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(generated.as_str()) {
                stale.push(module);
            }
        }
        assert!(
            stale.is_empty(),
            "{stale:?} differ from what guest-sdk/kinds.json generates: \
             POLICYHOST_BLESS=1 cargo test -p policyhost-sdk --test kinds"
        );
    }

    #[test]
    fn constants_are_screaming_snake_case_and_rules_camel_case() {
        assert_eq!(constant("configMap"), "CONFIG_MAP");
        assert_eq!(constant("pod"), "POD");
        assert_eq!(camel("dns1123_subdomain"), "dns1123Subdomain");
        assert_eq!(
            rule_text(&["Never".into(), "OnFailure".into()]),
            "must be Never or OnFailure"
        );
    }
}
