//! A trace collector on loopback, for `policyhost dev --jaeger` and the
//! tests: Jaeger (v2, `cargo xtask jaeger` builds it from its Go module)
//! with its in-memory store, taking OTLP over HTTP and serving its query API
//! on free ports of 127.0.0.1. A development tool: built with the `dev`
//! feature, not in the production image.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the collector may take to listen.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Traces the in-memory store keeps; the oldest go first.
const MAX_TRACES: u32 = 100_000;

/// Why the collector could not start.
#[derive(Debug, thiserror::Error)]
pub enum JaegerError {
    /// Its configuration file, or its log.
    #[error("{path}: {source}")]
    File {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The binary would not run.
    #[error("cannot run {binary}: {source}")]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// It did not listen within 30 s, or exited.
    #[error("jaeger did not listen within 30 s; see {0}")]
    NotReady(PathBuf),
}

/// A running Jaeger; stopped when dropped.
pub struct LocalJaeger {
    child: Child,
    otlp: SocketAddr,
    query: SocketAddr,
}

impl LocalJaeger {
    /// Starts `binary` with its configuration and log in `dir`, and waits
    /// until it takes spans and answers queries.
    ///
    /// # Errors
    /// The directory cannot be written, the binary cannot run, or it does
    /// not listen within 30 s.
    pub fn start(binary: &Path, dir: &Path) -> Result<Self, JaegerError> {
        let file = |path: &Path| {
            let path = path.to_owned();
            move |source| JaegerError::File { path, source }
        };
        std::fs::create_dir_all(dir).map_err(file(dir))?;
        let [otlp, query, grpc] = free_ports().map_err(file(dir))?;
        let config = dir.join("jaeger.yaml");
        std::fs::write(&config, configuration(otlp, query, grpc)).map_err(file(&config))?;
        let log = dir.join("jaeger.log");
        let out = std::fs::File::create(&log).map_err(file(&log))?;
        let err = out.try_clone().map_err(file(&log))?;
        let child = Command::new(binary)
            .arg("--config")
            .arg(format!("file:{}", config.display()))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| JaegerError::Spawn {
                binary: binary.to_owned(),
                source,
            })?;
        let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let (otlp, query) = (at(otlp), at(query));
        let mut jaeger = Self { child, otlp, query };
        let until = Instant::now() + READY_WITHIN;
        while !(listening(otlp) && listening(query)) {
            let exited = jaeger.child.try_wait().ok().flatten().is_some();
            if exited || Instant::now() > until {
                return Err(JaegerError::NotReady(log));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(jaeger)
    }

    /// The OTLP/HTTP base address to give `--otlp-endpoint`.
    #[must_use]
    pub fn otlp_endpoint(&self) -> String {
        format!("http://{}", self.otlp)
    }

    /// The address of the query API (`/api/traces`, `/api/services`) and
    /// the UI.
    #[must_use]
    pub fn query(&self) -> SocketAddr {
        self.query
    }
}

impl Drop for LocalJaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three free ports of loopback: for OTLP, the query API and its gRPC twin.
fn free_ports() -> std::io::Result<[u16; 3]> {
    // Held together, so the three differ; released for Jaeger to take.
    let listeners = [(); 3].map(|()| TcpListener::bind("127.0.0.1:0"));
    let mut ports = [0; 3];
    for (port, listener) in ports.iter_mut().zip(listeners) {
        *port = listener?.local_addr()?.port();
    }
    Ok(ports)
}

fn listening(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Jaeger v2's configuration: the OTLP receiver (HTTP only), the in-memory
/// store, the query extension, and no telemetry of its own (its metrics'
/// default port would collide between two collectors, and its own traces
/// go to a default OTLP port nobody serves).
fn configuration(otlp: u16, query: u16, grpc: u16) -> String {
    format!(
        "\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    traces:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memory
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{grpc}
  jaeger_storage:
    backends:
      memory:
        memory:
          max_traces: {MAX_TRACES}
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
exporters:
  jaeger_storage_exporter:
    trace_storage: memory
"
    )
}
