//! The service under test: a `memplan serve` process started here (its memory is its own), an
//! external one (`--url`, `--pid` for its memory), or one in this process; and the sampler of
//! its memory, threads and open files (`/proc/PID`).

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How the service is reached.
#[derive(Debug, Clone, Default)]
pub struct ServerArgs {
    /// The `memplan` binary to start (`memplan serve`).
    pub serve_bin: Option<PathBuf>,
    /// An external service.
    pub url: Option<String>,
    /// The external service's process id (for its memory figures).
    pub pid: Option<u32>,
    /// `--workers` of the service started here.
    pub workers: Option<usize>,
    /// `--queue` of the service started here.
    pub queue: Option<usize>,
    /// Passed as `--token-file` to the service started here.
    pub token_file: Option<PathBuf>,
}

enum Handle {
    Spawned {
        child: Child,
        log: Arc<Mutex<Vec<String>>>,
    },
    External,
    InProcess {
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<std::io::Result<()>>,
    },
}

/// A service in this process: the sender that stops it and its task.
pub type InProcess = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
);

/// Starts a service with `config` in this process on a free loopback port: its `HOST:PORT`
/// and its handle.
pub async fn listen_here(config: memplan_api::Config) -> Result<(String, InProcess)> {
    let service = memplan_api::Service::start(config).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(memplan_api::serve(service, listener, async {
        let _ = stopped.await;
    }));
    Ok((addr, (stop, task)))
}

/// A running service.
pub struct Server {
    /// `HOST:PORT`.
    pub addr: String,
    /// Its process, when known (this process for an in-process service).
    pub pid: Option<u32>,
    /// What it is, for the report.
    pub describe: String,
    /// Holds the database of a service started here.
    dir: Option<PathBuf>,
    handle: Handle,
}

/// A fresh folder under the system's temporary folder.
fn temp_dir() -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("memplan-loadtest-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The address in `memplan serve`'s `listening on http://ADDR ...` line.
fn listening_addr(line: &str) -> Option<String> {
    let rest = line.split("listening on http://").nth(1)?;
    let addr = rest.split_whitespace().next()?;
    Some(addr.trim_end_matches('/').to_string())
}

impl Server {
    /// Starts (or finds) the service.
    pub async fn start(a: &ServerArgs) -> Result<Server> {
        if let Some(url) = &a.url {
            let addr = url
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_string();
            return Ok(Server {
                describe: format!("external service at {url}"),
                addr,
                pid: a.pid,
                dir: None,
                handle: Handle::External,
            });
        }
        let dir = temp_dir()?;
        match &a.serve_bin {
            Some(bin) => Self::spawn(bin, a, dir).await,
            None => Self::in_process(a, dir).await,
        }
    }

    async fn spawn(bin: &Path, a: &ServerArgs, dir: PathBuf) -> Result<Server> {
        let db = dir.join("load.db");
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .args(["--addr", "127.0.0.1:0", "--db"])
            .arg(&db);
        if let Some(w) = a.workers {
            cmd.args(["--workers", &w.to_string()]);
        }
        if let Some(q) = a.queue {
            cmd.args(["--queue", &q.to_string()]);
        }
        if let Some(f) = &a.token_file {
            cmd.arg("--token-file").arg(f);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} serve", bin.display()))?;
        let stderr = child.stderr.take().context("the server's stderr")?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                match (tx.as_ref(), listening_addr(&line)) {
                    (Some(t), Some(addr)) => {
                        let _ = t.send(addr);
                        tx = None;
                    }
                    _ => {
                        if let Ok(mut l) = lines.lock() {
                            l.push(line);
                        }
                    }
                }
            }
        });
        let addr = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60)))
            .await?
            .ok();
        let Some(addr) = addr else {
            let _ = child.kill();
            let _ = child.wait();
            let said = log.lock().map(|l| l.join("\n")).unwrap_or_default();
            bail!(
                "{} serve did not say where it listens; it said:\n{said}",
                bin.display()
            );
        };
        let mut describe = format!("`memplan serve` (pid {}", child.id());
        if let Some(w) = a.workers {
            describe += &format!(", --workers {w}");
        }
        if let Some(q) = a.queue {
            describe += &format!(", --queue {q}");
        }
        describe += ", database on disk)";
        Ok(Server {
            addr,
            pid: Some(child.id()),
            describe,
            dir: Some(dir),
            handle: Handle::Spawned { child, log },
        })
    }

    async fn in_process(a: &ServerArgs, dir: PathBuf) -> Result<Server> {
        if a.token_file.is_some() {
            bail!("--server-token-file needs --serve-bin (a service in this process has no token file)");
        }
        let config = memplan_api::Config {
            db_path: Some(dir.join("load.db")),
            workers: a
                .workers
                .unwrap_or_else(memplan_api::config::default_workers),
            queue: a.queue.unwrap_or(memplan_api::config::DEFAULT_QUEUE),
            ..memplan_api::Config::default()
        };
        let describe = format!(
            "service in this process (workers {}, queue {}; its memory figures include the clients')",
            config.workers, config.queue
        );
        let (addr, (stop, task)) = listen_here(config).await?;
        Ok(Server {
            addr,
            pid: Some(std::process::id()),
            describe,
            dir: Some(dir),
            handle: Handle::InProcess { stop, task },
        })
    }

    /// What the service wrote on stderr after it started listening.
    pub fn log(&self) -> Vec<String> {
        match &self.handle {
            Handle::Spawned { log, .. } => log.lock().map(|l| l.clone()).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Stops a service started here (SIGTERM, then waits up to a minute): whether it stopped
    /// cleanly, and how, for the report.
    pub async fn stop(self) -> Result<(bool, String)> {
        let started = Instant::now();
        let out = match self.handle {
            Handle::External => (true, "left running (external)".to_string()),
            Handle::InProcess { stop, task } => {
                let _ = stop.send(());
                match tokio::time::timeout(Duration::from_secs(60), task).await {
                    Ok(Ok(Ok(()))) => (
                        true,
                        format!("stopped in {:.1} s", started.elapsed().as_secs_f64()),
                    ),
                    Ok(r) => (false, format!("stopped with an error: {r:?}")),
                    Err(_) => (false, "did not stop within 60 s".to_string()),
                }
            }
            Handle::Spawned { mut child, .. } => {
                let term = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
                if !term.is_ok_and(|s| s.success()) {
                    let _ = child.kill();
                }
                let status = tokio::task::spawn_blocking(move || {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    loop {
                        match child.try_wait() {
                            Ok(Some(s)) => return Some(s),
                            Ok(None) if Instant::now() < deadline => {
                                std::thread::sleep(Duration::from_millis(20))
                            }
                            _ => {
                                let _ = child.kill();
                                let _ = child.wait();
                                return None;
                            }
                        }
                    }
                })
                .await?;
                let secs = started.elapsed().as_secs_f64();
                match status {
                    Some(s) if s.success() => (true, format!("SIGTERM: exit 0 in {secs:.1} s")),
                    Some(s) => (false, format!("SIGTERM: {s} after {secs:.1} s")),
                    None => (
                        false,
                        "SIGTERM: still running after 60 s, killed".to_string(),
                    ),
                }
            }
        };
        if let Some(dir) = self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        Ok(out)
    }
}

/// One reading of a process's figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// Resident memory (VmRSS, bytes).
    pub rss: u64,
    /// Peak resident memory so far (VmHWM, bytes).
    pub hwm: u64,
    /// Threads.
    pub threads: u64,
    /// Open file descriptors (sockets included).
    pub fds: u64,
}

/// Reads `/proc/PID/status` and counts `/proc/PID/fd`.
pub fn sample(pid: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].split_whitespace().next()?.parse().ok()
    };
    Some(Sample {
        rss: field("VmRSS:")? * 1024,
        hwm: field("VmHWM:").unwrap_or(0) * 1024,
        threads: field("Threads:").unwrap_or(0),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64),
    })
}

/// The highest figures seen by a [`Sampler`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Peaks {
    /// Readings taken.
    pub samples: usize,
    /// Largest VmRSS.
    pub rss: u64,
    /// Most threads.
    pub threads: u64,
    /// Most open descriptors.
    pub fds: u64,
}

/// Samples a process every `every` on a thread of its own until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Peaks>,
}

impl Sampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32, every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut p = Peaks::default();
            while !flag.load(Ordering::SeqCst) {
                if let Some(s) = sample(pid) {
                    p.samples += 1;
                    p.rss = p.rss.max(s.rss);
                    p.threads = p.threads.max(s.threads);
                    p.fds = p.fds.max(s.fds);
                }
                std::thread::sleep(every);
            }
            p
        });
        Sampler { stop, thread }
    }

    /// Stops and returns the peaks.
    pub fn finish(self) -> Peaks {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_address_memplan_serve_prints() {
        let line = "memplan serve: listening on http://127.0.0.1:41234 (database /tmp/x.db, 2 workers, queue 256; docs at /docs)";
        assert_eq!(listening_addr(line).as_deref(), Some("127.0.0.1:41234"));
        assert_eq!(listening_addr("memplan serve: stopped"), None);
    }

    #[test]
    fn samples_this_process() {
        let s = sample(std::process::id()).expect("/proc of this process");
        assert!(s.rss > 0 && s.threads >= 1 && s.fds >= 1);
    }
}
