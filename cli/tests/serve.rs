//! `memplan serve` as a process: jobs survive an abrupt kill and a SIGTERM, and the
//! Dockerfile's build and run commands match the README.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::sample_json;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `memplan serve` on a free port and waits for its "listening on" line.
fn start(db: &Path, extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(["serve", "--addr", "127.0.0.1:0", "--db"])
        .arg(db)
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("server exited before listening")
            .unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Server { child, addr }
}

/// One HTTP/1.1 request on its own connection: (status, body).
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    try_http(addr, method, path, body).unwrap()
}

/// A graph whose exact placement search runs until its time limit (see the API tests).
fn busy_graph() -> Value {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (n, window) = (1200u64, 200u64);
    let mut tensors = vec![json!({"name": "t0", "size": 4096, "kind": "input"})];
    let mut ops = Vec::new();
    for i in 1..=n {
        let kind = if i == n { "output" } else { "activation" };
        tensors
            .push(json!({"name": format!("t{i}"), "size": 256 * (1 + next() % 977), "kind": kind}));
        let mut inputs = vec![format!("t{}", i - 1)];
        for _ in 0..2 {
            let back = 1 + next() % window;
            if back <= i {
                inputs.push(format!("t{}", i - back));
            }
        }
        ops.push(json!({"name": format!("op{i}"), "inputs": inputs, "outputs": [format!("t{i}")]}));
    }
    json!({"format": "memplan-graph/1", "name": "busy", "tensors": tensors, "ops": ops})
}

fn submit(s: &Server, graph: Value, options: Value) -> String {
    let (status, body) = http(
        &s.addr,
        "POST",
        "/v1/jobs",
        &json!({"graph": graph, "options": options}).to_string(),
    );
    assert_eq!(status, 202, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["id"].as_str().unwrap().to_string()
}

fn wait(s: &Server, id: &str, until: impl Fn(&str) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, body) = http(&s.addr, "GET", &format!("/v1/jobs/{id}"), "");
        assert_eq!(status, 200, "job {id} vanished: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        if until(v["status"].as_str().unwrap()) {
            return v;
        }
        assert!(Instant::now() < deadline, "job {id} stuck: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn jobs_survive_an_abrupt_kill_and_complete_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memplan.db");
    let s = start(&db, &["--workers", "1"]);
    let busy = submit(
        &s,
        busy_graph(),
        json!({"time_limit_s": 3, "order": "given", "effort": 1000}),
    );
    wait(&s, &busy, |st| st == "running");
    let queued: Vec<String> = [json!({"strategy": "heuristic"}), json!({"order": "given"})]
        .into_iter()
        .map(|o| submit(&s, sample_json(), o))
        .collect();
    drop(s); // SIGKILL: no chance to persist anything more
    let s = start(&db, &["--workers", "1"]);
    let v = wait(&s, &busy, |st| st == "done" || st == "failed");
    assert_eq!(v["status"], "done", "{v}");
    assert_eq!(v["attempts"], 2, "interrupted once, then run again: {v}");
    for id in &queued {
        let v = wait(&s, id, |st| st == "done" || st == "failed");
        assert_eq!(v["status"], "done", "{v}");
        let (status, plan) = http(&s.addr, "GET", &format!("/v1/jobs/{id}/plan"), "");
        assert_eq!(status, 200);
        assert!(plan.contains("memplan-plan/1"));
    }
}

#[test]
fn sigterm_stops_the_service_gracefully_and_the_interrupted_job_runs_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memplan.db");
    let mut s = start(&db, &["--workers", "1", "--shutdown-grace", "0"]);
    let busy = submit(
        &s,
        busy_graph(),
        json!({"time_limit_s": 3, "order": "given", "effort": 1000}),
    );
    wait(&s, &busy, |st| st == "running");
    let pid = s.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let s = start(&db, &["--workers", "1"]);
    let v = wait(&s, &busy, |st| st == "done" || st == "failed");
    assert_eq!(v["status"], "done", "{v}");
    // Every start counts, the one a graceful stop ended too (it is not counted as a crash,
    // so it never brings the job nearer to being failed).
    assert_eq!(
        v["attempts"], 2,
        "started, stopped gracefully, run again: {v}"
    );
}

/// One HTTP/1.1 request that may fail (the server may be gone): (status, body), a chunked
/// body decoded.
fn try_http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "no HTTP response");
    let (head, rest) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Ok((status, rest.to_string()));
    }
    let mut out = String::new();
    let mut rest = rest;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).map_err(|_| bad())?;
        if n == 0 {
            break;
        }
        out.push_str(tail.get(..n).ok_or_else(bad)?);
        rest = tail.get(n + 2..).ok_or_else(bad)?;
    }
    Ok((status, out))
}

#[test]
fn a_kill_9_in_a_stream_of_writes_loses_no_accepted_job_and_leaves_the_database_intact() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memplan.db");
    let flags = [
        "--workers",
        "2",
        "--queue",
        "100000",
        "--max-jobs-per-client",
        "100000",
    ];
    let mut accepted: Vec<String> = Vec::new();
    // Three kills at different moments, each in the middle of submissions and job writes.
    for (round, after_ms) in [700u64, 1_300, 2_100].into_iter().enumerate() {
        let s = start(&db, &flags);
        let ids = Arc::new(Mutex::new(Vec::<String>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let (addr, ids, stop) = (s.addr.clone(), ids.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let mut g = sample_json();
                        g["name"] = json!(format!("r{round}-w{w}-{i}"));
                        let body = json!({"graph": g, "options": {"strategy": "heuristic", "cache": false}});
                        match try_http(&addr, "POST", "/v1/jobs", &body.to_string()) {
                            Ok((202, text)) => {
                                let v: Value = serde_json::from_str(&text).unwrap();
                                ids.lock().unwrap().push(v["id"].as_str().unwrap().to_string());
                            }
                            Ok((status, text)) => panic!("job refused: {status} {text}"),
                            // The server was killed under this request.
                            Err(_) => return,
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(after_ms));
        drop(s); // SIGKILL in the middle of the stream
        stop.store(true, Ordering::SeqCst);
        for w in writers {
            w.join().unwrap();
        }
        let ids = ids.lock().unwrap().clone();
        assert!(
            ids.len() >= 5,
            "round {round}: only {} jobs before the kill",
            ids.len()
        );
        accepted.extend(ids);
        // The file is consistent and holds every job that was answered 202.
        let store = memplan_api::store::Store::open(Some(&db)).unwrap();
        assert_eq!(store.integrity_check().unwrap(), "ok", "round {round}");
        for id in &accepted {
            assert!(
                store.job(id).unwrap().is_some(),
                "round {round}: accepted job {id} lost"
            );
        }
    }
    // After a last restart every accepted job completes.
    let s = start(&db, &flags);
    for id in &accepted {
        let v = wait(&s, id, |st| st == "done" || st == "failed");
        assert_eq!(v["status"], "done", "{v}");
    }
}

/// Runs `memplan serve` expecting it to refuse to start: its stderr.
fn refused(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .arg("serve")
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "serve {args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_database_path_that_cannot_be_opened_exits_2_naming_the_flag_and_keeps_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let not_db = dir.path().join("graph.json");
    std::fs::write(&not_db, "{\"not\": \"a database\"}").unwrap();
    let missing = dir.path().join("missing").join("x.db");
    for db in [dir.path(), not_db.as_path(), missing.as_path()] {
        let out = Command::new(env!("CARGO_BIN_EXE_memplan"))
            .args(["serve", "--addr", "127.0.0.1:0", "--db"])
            .arg(db)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", db.display());
        assert!(
            err.contains(&format!(
                "--db {}: cannot open the job database",
                db.display()
            )),
            "{err}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&not_db).unwrap(),
        "{\"not\": \"a database\"}"
    );
}

#[test]
fn serve_refuses_a_public_address_without_tokens_unless_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memplan.db");
    let db_arg = db.to_str().unwrap();
    let err = refused(&["--addr", "0.0.0.0:0", "--db", db_arg]);
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0") && err.contains("--token-file"),
        "{err}"
    );
    // --insecure starts it anyway (on all interfaces; the test talks to it over loopback).
    let mut child = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(["serve", "--addr", "0.0.0.0:0", "--insecure", "--db", db_arg])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = lines.next().unwrap().unwrap();
    assert!(line.contains("listening on http://0.0.0.0:"), "{line}");
    assert!(line.contains("no access control"), "{line}");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn with_a_token_file_the_service_needs_a_bearer_token_and_a_bad_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memplan.db");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "ci  ci-token-5b9e1c7a3f2d\n").unwrap();
    let s = start(&db, &["--token-file", tokens.to_str().unwrap()]);
    let (status, _) = http(&s.addr, "GET", "/healthz", "");
    assert_eq!(status, 200);
    let (status, body) = http(&s.addr, "GET", "/v1/jobs", "");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("bearer token"), "{body}");
    let mut c = TcpStream::connect(&s.addr).unwrap();
    write!(
        c,
        "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ci-token-5b9e1c7a3f2d\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    c.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    drop(s);
    // A token file with a weak token: refused at start, naming the line, never the token.
    std::fs::write(&tokens, "# ok\nshort\n").unwrap();
    let err = refused(&[
        "--db",
        db.to_str().unwrap(),
        "--token-file",
        tokens.to_str().unwrap(),
    ]);
    assert!(
        err.contains("token file line 2") && !err.contains("short"),
        "{err}"
    );
    let err = refused(&["--db", db.to_str().unwrap(), "--retention", "7w"]);
    assert!(err.contains("unknown unit"), "{err}");
}

/// The instructions of a Dockerfile, continuation lines joined.
fn instructions(dockerfile: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in dockerfile.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && cur.is_empty()) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
        } else {
            cur.push_str(t);
            out.push(std::mem::take(&mut cur));
        }
    }
    out
}

fn exec_form(instr: &str, keyword: &str) -> Vec<String> {
    let json = instr.strip_prefix(keyword).unwrap().trim();
    serde_json::from_str(json).unwrap()
}

#[test]
fn the_dockerfile_build_and_run_commands_match_the_readme() {
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let ins = instructions(&dockerfile);
    fn find<'a>(ins: &'a [String], kw: &'a str) -> impl Iterator<Item = &'a String> + 'a {
        ins.iter().filter(move |i| i.starts_with(kw))
    }

    // Two stages: a builder with HiGHS' build needs (the README's apt-get list), a runtime.
    let froms: Vec<&String> = find(&ins, "FROM ").collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    assert!(froms[0].ends_with(" AS builder"), "{}", froms[0]);
    let apt = readme
        .lines()
        .find(|l| l.contains("apt-get install -y cmake"))
        .expect("README lists the build packages");
    let packages: Vec<&str> = apt
        .split("apt-get install -y")
        .nth(1)
        .unwrap()
        .split(['`', ')'])
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let builder_apt = find(&ins, "RUN ")
        .find(|r| r.contains("apt-get install"))
        .unwrap();
    for p in &packages {
        assert!(builder_apt.contains(p), "builder lacks {p}: {builder_apt}");
    }

    // The builder builds the package whose binary is `memplan`, and the runtime copies it.
    let build = find(&ins, "RUN ")
        .find(|r| r.contains("cargo build"))
        .unwrap();
    assert!(
        build.contains("--release") && build.contains("--locked"),
        "{build}"
    );
    assert!(build.contains("-p memplan-cli"), "{build}");
    let cli_toml = std::fs::read_to_string(repo().join("cli/Cargo.toml")).unwrap();
    assert!(cli_toml.contains("name = \"memplan-cli\"") && cli_toml.contains("name = \"memplan\""));
    assert!(find(&ins, "COPY --from=builder ").any(|c| c.contains("memplan")));

    // The run command: `memplan serve --addr 0.0.0.0:8080 ...`, as the README shows it.
    let entry = exec_form(find(&ins, "ENTRYPOINT ").next().unwrap(), "ENTRYPOINT");
    let cmd = exec_form(find(&ins, "CMD ").next().unwrap(), "CMD");
    let run: Vec<String> = entry.into_iter().chain(cmd).collect();
    assert_eq!(run[..4], ["memplan", "serve", "--addr", "0.0.0.0:8080"]);
    let line = run.join(" ");
    assert!(
        readme.contains(&line),
        "README does not show the image's command `{line}`"
    );

    // Port and volume agree with the README's docker commands.
    let port = run[3].rsplit(':').next().unwrap();
    assert!(find(&ins, "EXPOSE ").any(|e| e == &format!("EXPOSE {port}")));
    let db = &run[run.iter().position(|a| a == "--db").unwrap() + 1];
    let volume = Path::new(db).parent().unwrap().to_str().unwrap();
    assert!(find(&ins, "VOLUME ").any(|v| v.contains(&format!("\"{volume}\""))));
    assert!(readme.contains("docker build -t memplan ."));
    let docker_run = readme
        .lines()
        .find(|l| l.trim_start().starts_with("docker run"))
        .expect("README shows docker run");
    assert!(
        docker_run.contains(&format!("-p {port}:{port}")),
        "{docker_run}"
    );
    assert!(docker_run.contains(&format!(":{volume}")), "{docker_run}");
    // A public address needs tokens: the image reads a token file the README mounts.
    let tokens = &run[run
        .iter()
        .position(|a| a == "--token-file")
        .expect("the image serves without tokens")
        + 1];
    assert!(
        docker_run.contains(&format!(":{tokens}:ro")),
        "{docker_run}"
    );

    // Every flag of the command is one `memplan serve` takes.
    let help = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in run.iter().filter(|a| a.starts_with("--")) {
        assert!(help.contains(flag.as_str()), "memplan serve has no {flag}");
    }
}
