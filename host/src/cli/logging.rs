//! The operator's own log on stderr: text lines, or JSON lines with
//! `POLICYHOST_LOG_FORMAT=json`, filtered by `POLICYHOST_LOG`; beside it,
//! when configured, the traces' layer ([`policyhost::traces`]), with its own
//! filter.
//!
//! Log text carries what tenants wrote (guest `log()` lines and output,
//! condition messages, names), so no record may span two lines nor act on
//! the terminal showing it: in the text format every character the CLI
//! escapes ([`super::terminal::is_escaped`]: controls, bidirectional
//! controls) of a record but its final newline is escaped, as the CLI
//! escapes it ([`Escaping`]); tracing-subscriber already escapes ANSI escape
//! sequences in field values, and JSON escapes every C0 control character.

use std::borrow::Cow;
use std::io::{self, IsTerminal as _, Write};

use policyhost::traces;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use super::terminal::{self, eprintln};

/// A layer of the process's subscriber.
type Boxed = Box<dyn Layer<Registry> + Send + Sync>;

/// Installs the process's subscriber: the log, and the traces if `traces`
/// turns them on; the traces' guard flushes them at the end.
///
/// # Errors
/// The traces' configuration is refused (the log is installed all the same).
pub(crate) fn init(
    default_level: &str,
    traces: Option<&traces::Config>,
) -> Result<Option<traces::Guard>, traces::Error> {
    let filter =
        EnvFilter::try_from_env("POLICYHOST_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    let log = if std::env::var("POLICYHOST_LOG_FORMAT").is_ok_and(|f| f == "json") {
        json(filter, io::stderr)
    } else {
        let ansi = io::stderr().is_terminal();
        text(filter, EscapedStderr, ansi)
    };
    let tracing = match traces.map(traces::install::<Registry>).transpose() {
        Ok(tracing) => tracing.flatten(),
        Err(error) => {
            install(log, None);
            return Err(error);
        }
    };
    let (layer, guard) = tracing.map(|t| (t.layer, t.guard)).unzip();
    install(log, layer);
    Ok(guard)
}

/// Installs the log and the traces' layer, if any.
fn install(log: Boxed, traces: Option<Boxed>) {
    // `try_init` also forwards the `log` crate's records to tracing.
    let layers: Vec<Boxed> = std::iter::once(log).chain(traces).collect();
    Registry::default()
        .with(layers)
        .try_init()
        .unwrap_or_else(|error| eprintln!("warning: cannot install the log subscriber: {error}"));
}

/// The text format, one escaped line per record.
fn text<W>(filter: EnvFilter, writer: W, ansi: bool) -> Boxed
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(writer)
        .with_filter(filter)
        .boxed()
}

/// The JSON-lines format.
fn json<W>(filter: EnvFilter, writer: W) -> Boxed
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .json()
        .with_filter(filter)
        .boxed()
}

/// Makes an [`Escaping`] stderr, locked for one record.
struct EscapedStderr;

impl<'w> MakeWriter<'w> for EscapedStderr {
    type Writer = Escaping<io::StderrLock<'static>>;

    fn make_writer(&'w self) -> Self::Writer {
        Escaping(io::stderr().lock())
    }
}

/// Writes each record (tracing-subscriber's formatter hands over one whole
/// record per `write`) with its escaped characters shown as the CLI shows
/// them ([`terminal::escaped_but`]: `\n`, `\x07`, `\u{202e}`), except the
/// record's final newline and ESC, which only the formatter's own colours
/// contain (user text has it escaped already). A record without such
/// characters, the common case, is written as it is.
pub(crate) struct Escaping<W>(pub(crate) W);

/// ESC, which starts the formatter's colours.
fn is_colour(c: char) -> bool {
    c == '\x1b'
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, record: &[u8]) -> io::Result<usize> {
        let (body, end): (&[u8], &[u8]) = match record.split_last() {
            Some((b'\n', body)) => (body, b"\n"),
            _ => (record, b""),
        };
        // The formatter writes UTF-8; anything else would show as U+FFFD.
        let text = String::from_utf8_lossy(body);
        match (&text, terminal::escaped_but(&text, is_colour)) {
            (Cow::Borrowed(_), Cow::Borrowed(_)) => self.0.write_all(record)?,
            (_, shown) => self.0.write_all(&[shown.as_bytes(), end].concat())?,
        }
        Ok(record.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Collects what the subscriber writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// A record as a guest would make one: a forged line after a newline.
    const FORGED: &str = "ok\n2026-01-01T00:00:00Z  INFO policyhost: forged\r\tand \x00 more";

    fn emit() {
        tracing::warn!(
            target: "policyhost::guest",
            policy = "flood",
            job = "team-a/job-1",
            "{FORGED}"
        );
        tracing::warn!(
            job = "team-a/job-1",
            reason = "Trap",
            error = FORGED,
            "reconcile failed"
        );
    }

    #[test]
    fn control_characters_are_escaped_except_each_records_final_newline() {
        let mut out = Vec::new();
        Escaping(&mut out)
            .write_all(b"a\nb\rc\td\x00e\x7f\x1b[0m\n")
            .unwrap();
        assert_eq!(out, b"a\\nb\\rc\\td\\x00e\\x7f\x1b[0m\n");
        let mut out = Vec::new();
        Escaping(&mut out).write_all(b"plain record\n").unwrap();
        assert_eq!(out, b"plain record\n");
    }

    #[test]
    fn c1_and_bidirectional_controls_are_escaped_as_the_cli_escapes_them() {
        let mut out = Vec::new();
        Escaping(&mut out)
            .write_all("\x1b[33mWARN\x1b[0m job \u{9b}2J admin\u{202e}gpj.exe\n".as_bytes())
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\x1b[33mWARN\x1b[0m job \\u{9b}2J admin\\u{202e}gpj.exe\n"
        );
    }

    #[test]
    fn a_newline_in_a_message_or_a_field_cannot_forge_a_text_log_line() {
        let sink = Sink::default();
        let writer = {
            let sink = sink.clone();
            move || Escaping(sink.clone())
        };
        let subscriber = Registry::default().with(text(EnvFilter::new("info"), writer, true));
        tracing::subscriber::with_default(subscriber, emit);
        let text = sink.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0]
                .contains(r"ok\n2026-01-01T00:00:00Z  INFO policyhost: forged\r\tand \x00 more")
        );
        assert!(lines[1].contains("reconcile failed"), "{text}");
        assert!(
            lines
                .iter()
                .all(|line| !line.contains(" INFO policyhost: forged\n"))
        );
    }

    /// The keys of a JSON object, in order, duplicates kept.
    fn keys(line: &str) -> Vec<String> {
        struct Keys(Vec<String>);
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                mut self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                while let Some((key, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                    self.0.push(key);
                }
                Ok(self.0)
            }
        }
        let mut de = serde_json::Deserializer::from_str(line);
        serde::Deserializer::deserialize_map(&mut de, Keys(Vec::new())).unwrap()
    }

    #[test]
    fn json_lines_carry_one_message_key_and_the_fields_beside_it() {
        let sink = Sink::default();
        let writer = {
            let sink = sink.clone();
            move || sink.clone()
        };
        let subscriber = Registry::default().with(json(EnvFilter::new("info"), writer));
        tracing::subscriber::with_default(subscriber, emit);
        let text = sink.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        for line in lines {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            let fields = &value["fields"];
            let names = keys(&fields.to_string());
            assert_eq!(
                names.iter().filter(|k| *k == "message").count(),
                1,
                "{line}"
            );
            assert_eq!(fields["job"], "team-a/job-1", "{line}");
        }
    }

    /// Every tracing macro call in `host/src`, as text.
    fn tracing_calls() -> Vec<(String, String)> {
        fn walk(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let source = std::fs::read_to_string(&path).unwrap();
                for macro_name in [
                    "trace!(", "debug!(", "info!(", "warn!(", "error!(", "_span!(",
                ] {
                    let mut rest = source.as_str();
                    while let Some(at) = rest.find(macro_name) {
                        let call = &rest[at + macro_name.len()..];
                        let mut depth = 1;
                        let end = call
                            .char_indices()
                            .find(|&(_, c)| {
                                depth += match c {
                                    '(' => 1,
                                    ')' => -1,
                                    _ => 0,
                                };
                                depth == 0
                            })
                            .map_or(call.len(), |(i, _)| i);
                        out.push((path.display().to_string(), call[..end].to_owned()));
                        rest = &call[end..];
                    }
                }
            }
        }
        let mut calls = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut calls,
        );
        calls
    }

    #[test]
    fn no_log_call_in_the_host_adds_a_message_field_or_names_a_datajob_differently() {
        let calls = tracing_calls();
        assert!(calls.len() > 50, "found only {} log calls", calls.len());
        let fields = |call: &str| -> Vec<String> {
            call.split(',')
                .map(|part| part.trim().trim_start_matches(['%', '?']).to_owned())
                .collect()
        };
        for (file, call) in &calls {
            for field in fields(call) {
                let name = field.split(['=', ' ']).next().unwrap_or_default();
                assert_ne!(
                    name, "message",
                    "{file}: a `message` field beside the log text: {call}"
                );
                assert_ne!(
                    name, "datajob",
                    "{file}: a DataJob is the field `job`: {call}"
                );
            }
            assert!(
                !call.contains(&["job = %job", ".name_any()"].concat()),
                "{file}: a DataJob is named `namespace/name`: {call}"
            );
        }
    }
}
