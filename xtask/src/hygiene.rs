//! What a test run must leave behind: nothing. `cargo xtask test` watches
//! its passes and fails, naming what it found, when the tests
//!
//! - left a file in the system temp dir: the tests run with `TMPDIR` set to a
//!   fresh `<target>/tmp/system-temp/`, which must be empty at the end;
//! - added an entry to the top of the target directory (their scratch files
//!   belong under `<target>/tmp/`, which each run empties first);
//! - left a process running: one of the run's (below) still alive after a
//!   pass, or after the control plane stopped, is killed and named;
//! - listened beyond loopback: a sampler reads the listening TCP sockets
//!   every [`SAMPLE_EVERY`] and names each of the run's processes that
//!   listens on an address other machines could reach.
//!
//! The run's processes are the programs under the target directory that are
//! in the xtask's process group (the tests, what they start, the control
//! plane) or carry the run's `TMPDIR`: the same tree may hold another
//! engineer's `cargo test` or control plane at the same time, which are
//! neither. The xtask and its ancestors are never counted.
//!
//! kubectl keeps a discovery cache in `~/.kube/cache` unless `KUBECACHEDIR`
//! says otherwise: the tests get `<target>/tmp/kube-cache`, so that their
//! kubectl writes nothing in the home directory either.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How often the sampler reads the listening sockets.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// How long the run's processes may take to exit once a pass ended (a child
/// whose parent has just exited, the control plane after SIGTERM) before
/// they count as left behind.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// A test run under watch: from [`Watch::start`], after the builds, to
/// [`Watch::finish`], after the last pass.
pub struct Watch {
    run: Arc<Run>,
    system_temp: String,
    kube_cache: String,
    /// The target directory's top-level entries before the tests.
    entries: BTreeSet<OsString>,
    findings: Arc<Mutex<Vec<Finding>>>,
    sampler: Sampler,
}

impl Watch {
    /// Makes the tests' system temp dir, notes what the target directory
    /// holds and starts the listener sampler.
    pub fn start(target: &Path) -> Result<Self, String> {
        let target = fs::canonicalize(target)
            .map_err(|e| format!("cannot resolve {}: {e}", target.display()))?;
        let system_temp = target.join("tmp").join("system-temp");
        if system_temp.exists() {
            fs::remove_dir_all(&system_temp)
                .map_err(|e| format!("cannot empty {}: {e}", system_temp.display()))?;
        }
        fs::create_dir_all(&system_temp)
            .map_err(|e| format!("cannot create {}: {e}", system_temp.display()))?;
        let entries =
            top_level(&target).map_err(|e| format!("cannot read {}: {e}", target.display()))?;
        let system_temp = system_temp.display().to_string();
        let kube_cache = target.join("tmp").join("kube-cache").display().to_string();
        let run = Arc::new(Run::this(target, &system_temp)?);
        let findings = Arc::new(Mutex::new(Vec::new()));
        let sampler = Sampler::start(Arc::clone(&run), Arc::clone(&findings));
        Ok(Self {
            run,
            system_temp,
            kube_cache,
            entries,
            findings,
            sampler,
        })
    }

    /// The environment the test processes get: `TMPDIR` and `KUBECACHEDIR`.
    pub fn env(&self) -> [(&'static str, &str); 2] {
        [
            ("TMPDIR", &self.system_temp),
            ("KUBECACHEDIR", &self.kube_cache),
        ]
    }

    /// Kills and records the run's processes still alive after `pass`, but
    /// the programs under `spared` (those of a control plane still up).
    pub fn after_pass(&self, pass: &'static str, spared: Option<&Path>) {
        // Programs are known by their resolved path, as the target is.
        let spared = spared.map(|dir| fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned()));
        for process in self.run.left_behind(spared.as_deref()) {
            let killed = kill(process.pid);
            self.record(Finding::Process {
                after: pass,
                process,
                killed,
            });
        }
    }

    /// Checks the processes a last time, stops the sampler, checks the
    /// system temp dir and the target directory, and fails with what it
    /// found, after the tests' own failure if they failed.
    pub fn finish(self, tests: Result<(), String>) -> Result<(), String> {
        self.after_pass("the run", None);
        let Self {
            run,
            system_temp,
            entries,
            findings,
            sampler,
            ..
        } = self;
        sampler.stop();
        let mut findings = std::mem::take(&mut *lock(&findings));
        findings.extend(left_in_system_temp(Path::new(&system_temp)));
        findings.extend(added_to_target(&run.target, &entries));
        let report = Report(findings);
        match tests {
            Ok(()) if report.0.is_empty() => Ok(()),
            Ok(()) => Err(report.to_string()),
            Err(failure) if report.0.is_empty() => Err(failure),
            Err(failure) => Err(format!("{failure}\n{report}")),
        }
    }

    fn record(&self, finding: Finding) {
        lock(&self.findings).push(finding);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere leaves the list as it was: still worth reporting.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Everything in the tests' system temp dir.
fn left_in_system_temp(dir: &Path) -> Vec<Finding> {
    match top_level(dir) {
        Ok(names) => names
            .into_iter()
            .map(|name| Finding::TempFile(dir.join(name)))
            .collect(),
        Err(error) => vec![Finding::Unreadable {
            path: dir.to_path_buf(),
            error,
        }],
    }
}

/// The top-level entries of `target` not among those `before` the tests.
fn added_to_target(target: &Path, before: &BTreeSet<OsString>) -> Vec<Finding> {
    match top_level(target) {
        Ok(names) => names
            .difference(before)
            .map(|name| Finding::TargetEntry(target.join(name)))
            .collect(),
        Err(error) => vec![Finding::Unreadable {
            path: target.to_path_buf(),
            error,
        }],
    }
}

/// The names in `dir`, without its subdirectories' contents.
fn top_level(dir: &Path) -> io::Result<BTreeSet<OsString>> {
    fs::read_dir(dir)?
        .map(|entry| entry.map(|entry| entry.file_name()))
        .collect()
}

/// What a run did that it must not.
#[derive(Debug)]
enum Finding {
    /// A file or directory left in the tests' system temp dir.
    TempFile(PathBuf),
    /// A top-level entry of the target directory that was not there before
    /// the tests.
    TargetEntry(PathBuf),
    /// One of the run's processes, still alive `after` a pass.
    Process {
        after: &'static str,
        process: Process,
        /// Whether `kill -KILL` succeeded.
        killed: bool,
    },
    /// One of the run's processes listened on an address beyond loopback.
    Listener { process: Process, addr: SocketAddr },
    /// A directory the checks read could not be read.
    Unreadable { path: PathBuf, error: io::Error },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TempFile(path) => write!(f, "{} was left in the system temp dir", path.display()),
            Self::TargetEntry(path) => {
                write!(f, "{} was added to the target directory", path.display())
            }
            Self::Process {
                after,
                process,
                killed,
            } => {
                let fate = if *killed {
                    "killed"
                } else {
                    "could not be killed"
                };
                write!(f, "{process} was still running after {after} ({fate})")
            }
            Self::Listener { process, addr } => write!(f, "{process} listened on {addr}"),
            Self::Unreadable { path, error } => {
                write!(f, "{} could not be checked: {error}", path.display())
            }
        }
    }
}

/// Every finding of a run, one a line.
struct Report(Vec<Finding>);

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the tests must leave no file outside their temporary directories, no process \
             and no listener beyond loopback (docs/testing.md), but:"
        )?;
        for finding in &self.0 {
            write!(f, "\n  - {finding}")?;
        }
        Ok(())
    }
}

/// One process, as the findings name it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Process {
    pid: u32,
    exe: PathBuf,
    /// Its arguments, program first, joined by spaces.
    cmdline: String,
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process {} ({}): {}",
            self.pid,
            self.exe.display(),
            self.cmdline
        )
    }
}

/// Which processes are the run's.
struct Run {
    /// The canonical target directory: only programs under it are looked at.
    target: PathBuf,
    /// The xtask's process group, which the tests and the control plane
    /// share unless they start a group of their own.
    group: u32,
    /// `TMPDIR=<the tests' system temp dir>`, an entry of every test
    /// process's environment, in a group of its own or not.
    marker: Vec<u8>,
    /// The xtask and its ancestors (the xtask runs from the target dir).
    exempt: BTreeSet<u32>,
}

impl Run {
    /// The run of this xtask.
    fn this(target: PathBuf, system_temp: &str) -> Result<Self, String> {
        let me = std::process::id();
        let group = stat(me).ok_or("cannot read /proc/self/stat")?.group;
        let mut exempt = BTreeSet::from([me]);
        let mut pid = me;
        while let Some(parent) = stat(pid).map(|stat| stat.parent).filter(|p| *p > 1) {
            exempt.insert(parent);
            pid = parent;
        }
        Ok(Self {
            target,
            group,
            marker: format!("TMPDIR={system_temp}").into_bytes(),
            exempt,
        })
    }

    /// The run's processes alive once they had [`EXIT_GRACE`] to exit, but
    /// the programs under `spared`.
    fn left_behind(&self, spared: Option<&Path>) -> Vec<Process> {
        let deadline = Instant::now() + EXIT_GRACE;
        loop {
            let left: Vec<Process> = self
                .processes()
                .into_iter()
                .filter(|process| spared.is_none_or(|dir| !process.exe.starts_with(dir)))
                .collect();
            if left.is_empty() || Instant::now() >= deadline {
                return left;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The run's processes alive now.
    fn processes(&self) -> Vec<Process> {
        let Ok(entries) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| !self.exempt.contains(pid))
            .filter_map(|pid| self.process(pid))
            .collect()
    }

    /// Process `pid` if it is the run's. A zombie has no `exe` link: it is
    /// not running anything.
    fn process(&self, pid: u32) -> Option<Process> {
        let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        if !exe.starts_with(&self.target) {
            return None;
        }
        let in_group = stat(pid).is_some_and(|stat| stat.group == self.group);
        let marked = || {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| environ.split(|b| *b == 0).any(|var| var == self.marker))
        };
        if !in_group && !marked() {
            return None;
        }
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = cmdline
            .split(|b| *b == 0)
            .filter(|arg| !arg.is_empty())
            .map(String::from_utf8_lossy)
            .collect::<Vec<_>>()
            .join(" ");
        Some(Process { pid, exe, cmdline })
    }
}

/// `kill -KILL pid`; whether it succeeded.
fn kill(pid: u32) -> bool {
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .is_ok_and(|status| status.success())
}

/// The fields of `/proc/PID/stat` the checks use.
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    parent: u32,
    group: u32,
}

fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `PID (COMM) STATE PPID PGRP ...`; COMM may hold spaces and parentheses,
/// so the fields are counted from its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(") ")?;
    let mut fields = rest.split_ascii_whitespace().skip(1);
    Some(Stat {
        parent: fields.next()?.parse().ok()?,
        group: fields.next()?.parse().ok()?,
    })
}

/// The thread that records the run's listeners beyond loopback while the
/// tests run.
struct Sampler {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Sampler {
    fn start(run: Arc<Run>, findings: Arc<Mutex<Vec<Finding>>>) -> Self {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(SAMPLE_EVERY) {
                sample(&run, &findings);
            }
        });
        Self { stop, thread }
    }

    fn stop(self) {
        drop(self.stop);
        // A panic of the sampler loses only samples.
        let _ = self.thread.join();
    }
}

/// One sample: records each of the run's processes listening beyond
/// loopback, once per address.
fn sample(run: &Run, findings: &Mutex<Vec<Finding>>) {
    let exposed: Vec<Listening> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .into_iter()
        .filter_map(|table| fs::read_to_string(table).ok())
        .flat_map(|table| listening(&table))
        .filter(|socket| !loopback(socket.addr.ip()))
        .collect();
    if exposed.is_empty() {
        return;
    }
    for process in run.processes() {
        for inode in sockets(process.pid) {
            let Some(socket) = exposed.iter().find(|socket| socket.inode == inode) else {
                continue;
            };
            let mut findings = lock(findings);
            let known = findings.iter().any(|finding| {
                matches!(finding, Finding::Listener { process: p, addr }
                    if p.pid == process.pid && *addr == socket.addr)
            });
            if !known {
                findings.push(Finding::Listener {
                    process: process.clone(),
                    addr: socket.addr,
                });
            }
        }
    }
}

/// The inodes of the sockets process `pid` holds: its `fd/*` links read
/// `socket:[INODE]`.
fn sockets(pid: u32) -> Vec<u64> {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| fs::read_link(fd.path()).ok())
        .filter_map(|link| socket_inode(link.to_str()?))
        .collect()
}

fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// A listening TCP socket of `/proc/net/tcp` or `/proc/net/tcp6`.
#[derive(Debug, PartialEq, Eq)]
struct Listening {
    addr: SocketAddr,
    inode: u64,
}

/// The kernel's `TCP_LISTEN` state, as `/proc/net/tcp` prints it.
const LISTEN: &str = "0A";

/// The listening sockets of a `/proc/net/tcp` or `/proc/net/tcp6` table:
/// a header, then `sl local_address rem_address st ... uid timeout inode`.
fn listening(table: &str) -> Vec<Listening> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            if *fields.get(3)? != LISTEN {
                return None;
            }
            Some(Listening {
                addr: socket_addr(fields.get(1)?)?,
                inode: fields.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// `ADDRESS:PORT` as `/proc/net/tcp{,6}` prints it: the port in hex, the
/// address as one (IPv4) or four (IPv6) 32-bit words of 8 hex digits, each
/// word as the machine reads the address's bytes from memory (so 127.0.0.1
/// is `0100007F` on a little-endian machine).
fn socket_addr(text: &str) -> Option<SocketAddr> {
    let (address, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match address.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(address)?)),
        32 => {
            let mut bytes = [0; 16];
            for (chunk, hex) in bytes.chunks_exact_mut(4).zip(address.as_bytes().chunks(8)) {
                chunk.copy_from_slice(&word(std::str::from_utf8(hex).ok()?)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The bytes of one address word: 8 hex digits of a native-endian `u32`.
fn word(hex: &str) -> Option<[u8; 4]> {
    u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes)
}

/// Whether only this machine reaches `ip`: 127.0.0.0/8 and `::1`, the
/// former mapped into IPv6 too. `0.0.0.0` and `::` are every interface.
fn loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/net/tcp` of a little-endian machine: a listener on
    /// 127.0.0.1:8080, one on 0.0.0.0:22 and an established connection.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 99 1 0000000000000000 20 4 30 10 -1
";

    /// `/proc/net/tcp6`: `::1:6443`, `:::9090` and `::ffff:127.0.0.1:2379`.
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:192B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 501 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:2382 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 502 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:094B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 503 1 0000000000000000 100 0 0 10 0
";

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn the_ipv4_table_lists_listeners_only_with_their_addresses_and_inodes() {
        assert_eq!(
            listening(TCP),
            [
                Listening {
                    addr: addr("127.0.0.1:8080"),
                    inode: 4242
                },
                Listening {
                    addr: addr("0.0.0.0:22"),
                    inode: 17
                },
            ]
        );
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn the_ipv6_table_reads_loopback_any_and_v4_mapped_addresses() {
        assert_eq!(
            listening(TCP6),
            [
                Listening {
                    addr: addr("[::1]:6443"),
                    inode: 501
                },
                Listening {
                    addr: addr("[::]:9090"),
                    inode: 502
                },
                Listening {
                    addr: addr("[::ffff:127.0.0.1]:2379"),
                    inode: 503
                },
            ]
        );
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn an_address_on_another_interface_reads_in_network_order() {
        assert_eq!(socket_addr("0A00020F:01BB"), Some(addr("15.2.0.10:443")));
    }

    #[test]
    fn malformed_addresses_are_none() {
        for text in ["", "0100007F", "0100007F:", "0100007G:1F90", "0100:1F90"] {
            assert_eq!(socket_addr(text), None, "{text:?}");
        }
    }

    #[test]
    fn only_loopback_addresses_stay_on_the_machine() {
        for ip in ["127.0.0.1", "127.0.0.53", "::1", "::ffff:127.0.0.1"] {
            assert!(loopback(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["0.0.0.0", "::", "10.0.0.1", "::ffff:10.0.0.1", "fe80::1"] {
            assert!(!loopback(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn socket_links_give_their_inode_and_other_links_none() {
        assert_eq!(socket_inode("socket:[4242]"), Some(4242));
        assert_eq!(socket_inode("pipe:[4242]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }

    #[test]
    fn stat_fields_count_from_the_last_parenthesis_of_the_command() {
        let text = "4242 (tokio (worker) 1) S 17 4200 4200 0 -1 4194560 96 0 0 0";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                parent: 17,
                group: 4200
            })
        );
        assert_eq!(parse_stat("4242 (truncated"), None);
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn a_listener_of_this_process_is_found_by_its_socket_inode() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let table = fs::read_to_string("/proc/net/tcp").unwrap();
        let socket = listening(&table)
            .into_iter()
            .find(|socket| socket.addr == addr)
            .expect("the listener in /proc/net/tcp");
        assert!(sockets(std::process::id()).contains(&socket.inode));
    }

    #[test]
    fn a_program_under_the_target_dir_in_the_xtask_s_group_is_the_run_s_until_killed() {
        let target = fs::canonicalize(crate::target_dir()).unwrap();
        let dir = target
            .join("tmp")
            .join(format!("hygiene-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let sleep = dir.join("sleep");
        fs::copy("/bin/sleep", &sleep).unwrap();
        let mut child = Command::new(&sleep).arg("600").spawn().unwrap();
        let run = Run::this(target, "/nonexistent").unwrap();
        // Just after exec, the kernel may show an empty command line.
        let deadline = Instant::now() + Duration::from_secs(5);
        let found = loop {
            let found = run
                .processes()
                .into_iter()
                .find(|process| process.pid == child.id());
            if found.as_ref().is_some_and(|p| !p.cmdline.is_empty()) || Instant::now() > deadline {
                break found;
            }
            thread::sleep(Duration::from_millis(10));
        };
        let killed = kill(child.id());
        let _ = child.wait();
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(
            found,
            Some(Process {
                pid: child.id(),
                exe: sleep.clone(),
                cmdline: format!("{} 600", sleep.display()),
            })
        );
        assert!(killed);
        assert!(run.processes().iter().all(|p| p.pid != child.id()));
        assert!(
            run.processes().iter().all(|p| p.pid != std::process::id()),
            "the xtask itself is not counted"
        );
    }

    fn process() -> Process {
        Process {
            pid: 4242,
            exe: PathBuf::from("/w/target/debug/policyhost"),
            cmdline: "/w/target/debug/policyhost run".to_owned(),
        }
    }

    #[test]
    fn each_finding_names_what_and_where() {
        let cases = [
            (
                Finding::TempFile(PathBuf::from("/w/target/tmp/system-temp/x.kubeconfig")),
                "/w/target/tmp/system-temp/x.kubeconfig was left in the system temp dir",
            ),
            (
                Finding::TargetEntry(PathBuf::from("/w/target/scratch-1")),
                "/w/target/scratch-1 was added to the target directory",
            ),
            (
                Finding::Process {
                    after: "the devcluster pass",
                    process: process(),
                    killed: true,
                },
                "process 4242 (/w/target/debug/policyhost): /w/target/debug/policyhost run \
                 was still running after the devcluster pass (killed)",
            ),
            (
                Finding::Process {
                    after: "the run",
                    process: process(),
                    killed: false,
                },
                "process 4242 (/w/target/debug/policyhost): /w/target/debug/policyhost run \
                 was still running after the run (could not be killed)",
            ),
            (
                Finding::Listener {
                    process: process(),
                    addr: addr("0.0.0.0:8080"),
                },
                "process 4242 (/w/target/debug/policyhost): /w/target/debug/policyhost run \
                 listened on 0.0.0.0:8080",
            ),
            (
                Finding::Unreadable {
                    path: PathBuf::from("/w/target"),
                    error: io::Error::from(io::ErrorKind::NotFound),
                },
                "/w/target could not be checked: entity not found",
            ),
        ];
        for (finding, message) in cases {
            assert_eq!(finding.to_string(), message);
        }
    }

    #[test]
    fn the_report_lists_each_finding_on_a_line() {
        let report = Report(vec![
            Finding::TempFile(PathBuf::from("/t/a")),
            Finding::TargetEntry(PathBuf::from("/target/b")),
        ]);
        assert_eq!(
            report.to_string(),
            "the tests must leave no file outside their temporary directories, no process \
             and no listener beyond loopback (docs/testing.md), but:\n  \
             - /t/a was left in the system temp dir\n  \
             - /target/b was added to the target directory"
        );
    }
}
