//! Limits a client can rely on: a budgeted plan answers within its time limit, as the CLI
//! does; a body over the limit is answered 413 in a way the client gets to read, on a real
//! socket (with and without `Expect: 100-continue`, with a length or chunked); a client that
//! stalls is let go after the client timeout and cannot keep the service from stopping.

mod common;

use common::*;
use memplan_api::body_limit::DRAIN_MAX_TIME;
use memplan_api::{serve, Config, Service};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// The bundled sample extended by a chain of `n` relu ops, each reading the previous tensor,
/// the last one a graph output.
fn sample_with_relu_chain(n: usize) -> Value {
    let mut g = sample();
    let mut prev = "input".to_string();
    for i in 0..n {
        let name = format!("chain{i}");
        let kind = if i + 1 == n { "output" } else { "activation" };
        g["tensors"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name, "size": 6_422_528, "kind": kind}));
        g["ops"].as_array_mut().unwrap().push(json!({
            "name": format!("relu{i}"), "type": "relu", "inputs": [prev], "outputs": [name]
        }));
        prev = name;
    }
    g
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budgeted_plan_of_a_long_chain_answers_within_its_time_limit_as_the_cli_does() {
    let api = start(config(None)).await;
    let graph = sample_with_relu_chain(2000);
    let options = json!({"budget": 1, "time_limit_s": 0.1});
    let started = Instant::now();
    let r = api
        .post_json("/v1/plan", &plan_request(graph.clone(), options.clone()))
        .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    // The CLI's answer: exit 2 (bad input) with the pipeline's message, naming the cap.
    let p = r.assert_problem(422, "planning under the budget of 1 bytes was stopped");
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("the time limit of 0.1 s bound (raise time_limit_s): "),
        "{detail}"
    );
    // The solver slot is free again: a second request is served at once.
    let again = api
        .post_json(
            "/v1/plan",
            &plan_request(sample(), json!({"strategy": "heuristic"})),
        )
        .await;
    assert_eq!(again.status.as_u16(), 200, "{}", again.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feasible_budget_on_a_long_chain_answers_within_its_time_limit() {
    let api = start(config(None)).await;
    let graph = sample_with_relu_chain(2000);
    let started = Instant::now();
    let r = api
        .post_json(
            "/v1/plan",
            &plan_request(
                graph.clone(),
                json!({"budget": "90%", "time_limit_s": 0.2, "cache": false}),
            ),
        )
        .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    match r.status.as_u16() {
        // A plan fitted within the time: valid under its budget.
        200 => {
            let plan = memplan::Plan::parse(&r.text).unwrap();
            let budget = plan.stats.budget.as_ref().unwrap().budget_bytes;
            let g = memplan::Graph::parse(&graph.to_string()).unwrap();
            memplan::validate(&g, &plan, Some(budget)).unwrap();
        }
        // Or the cap bound first, and the answer says so.
        _ => {
            r.assert_problem(422, "the time limit of 0.2 s bound");
        }
    }
}

struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// The service on a free local port, with a body limit of `body_limit` bytes.
async fn server(body_limit: usize) -> Server {
    server_with(Config {
        body_limit,
        ..config(None)
    })
    .await
}

/// The service with `config` on a free local port.
async fn server_with(config: Config) -> Server {
    let service = Service::start(config).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(service, listener, async {
        let _ = rx.await;
    }));
    Server { addr, stop, task }
}

impl Server {
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}

const LIMIT: usize = 1 << 20;
/// Far more than the socket buffers hold: a server that does not read it resets the
/// connection under the upload.
const BIG: usize = 16 << 20;

const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// A plain blocking client: sends `parts` in turn on a new connection, then reads until the
/// server closes it. The answer, or what went wrong and when.
async fn exchange(addr: SocketAddr, parts: Vec<Vec<u8>>) -> Result<String, String> {
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        for (i, part) in parts.iter().enumerate() {
            stream
                .write_all(part)
                .map_err(|e| format!("sending part {i}: {e}"))?;
        }
        let mut out = Vec::new();
        stream
            .read_to_end(&mut out)
            .map_err(|e| format!("reading the answer: {e} (read: {out:?})"))?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    })
    .await
    .unwrap()
}

fn assert_413(answer: Result<String, String>) {
    let answer = answer.unwrap_or_else(|e| panic!("no answer to read: {e}"));
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("connection: close"), "{answer}");
    assert!(
        answer.contains("urn:memplan:problem:payload-too-large")
            && answer.contains(&format!("over the limit of {LIMIT} bytes")),
        "{answer}"
    );
}

fn chunked(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in body.chunks(64 << 10) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_a_body_over_the_limit_reads_the_413() {
    let s = server(LIMIT).await;
    let head = format!(
        "POST /v1/plan HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {BIG}\r\n\r\n"
    );
    assert_413(exchange(s.addr, vec![head.into_bytes(), vec![b' '; BIG]]).await);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_expects_100_continue_gets_the_413_without_sending_the_body() {
    let s = server(LIMIT).await;
    let head = format!(
        "POST /plan HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         expect: 100-continue\r\ncontent-length: {BIG}\r\n\r\n"
    );
    // No body is sent: the answer comes first, and it is the 413 (no 100 Continue).
    assert_413(exchange(s.addr, vec![head.into_bytes()]).await);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_the_limit_is_answered_413_and_one_within_it_is_served() {
    let s = server(LIMIT).await;
    let head = "POST /v1/plan HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
                transfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    let over = vec![head.as_bytes().to_vec(), chunked(&vec![b' '; BIG])];
    assert_413(exchange(s.addr, over).await);
    // Within it: planned as usual.
    let request = plan_request(sample(), json!({"strategy": "heuristic"})).to_string();
    let within = vec![head.as_bytes().to_vec(), chunked(request.as_bytes())];
    let answer = exchange(s.addr, within).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.contains("memplan-plan/1"), "{answer}");
    s.stop().await;
}

/// The service with a client timeout of `patience`.
async fn patient_server(patience: Duration) -> Server {
    server_with(Config {
        client_timeout: patience,
        ..config(None)
    })
    .await
}

/// Opens a connection, sends `part` and then nothing; returns the stream (open) so that the
/// client stays connected.
async fn stall(addr: SocketAddr, part: &'static [u8]) -> std::net::TcpStream {
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.write_all(part).unwrap();
        stream
    })
    .await
    .unwrap()
}

const HALF_BODY: &[u8] = b"POST /v1/plan HTTP/1.1\r\nhost: localhost\r\n\
    content-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"graph\": ";
const HALF_HEAD: &[u8] = b"POST /v1/plan HTTP/1.1\r\nhost: local";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_is_answered_408_after_the_client_timeout() {
    let s = patient_server(Duration::from_millis(300)).await;
    let started = Instant::now();
    let mut stream = stall(s.addr, HALF_BODY).await;
    let answer = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        stream.read_to_end(&mut out).unwrap();
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(
        answer.contains("urn:memplan:problem:request-timeout")
            && answer.contains("\"limit\":\"client_timeout\""),
        "{answer}"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    // A body that comes at the client's pace, within the timeout between its pieces, is served.
    let request = plan_request(sample(), json!({"strategy": "heuristic"})).to_string();
    let head = format!(
        "POST /v1/plan HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        request.len()
    );
    let (a, b) = request.as_bytes().split_at(request.len() / 2);
    let (a, b) = (a.to_vec(), b.to_vec());
    let addr = s.addr;
    let answer = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        for piece in [a, b] {
            std::thread::sleep(Duration::from_millis(150));
            stream.write_all(&piece).unwrap();
        }
        let mut out = Vec::new();
        stream.read_to_end(&mut out).unwrap();
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_over_the_limit_is_answered_413_after_the_client_timeout() {
    let s = server_with(Config {
        body_limit: LIMIT,
        client_timeout: Duration::from_millis(300),
        ..config(None)
    })
    .await;
    // A declared length over the limit, a little of the body, then nothing: the refused
    // body is discarded while it comes, and its stall ends that as a stall within the
    // limit ends the read (before: only the drain's own cap of 5 s did).
    let head = format!(
        "POST /v1/plan HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {BIG}\r\n\r\n"
    );
    let part: &'static [u8] =
        Box::leak([head.as_bytes(), &[b' '; 1024]].concat().into_boxed_slice());
    let started = Instant::now();
    let mut stream = stall(s.addr, part).await;
    let answer = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let read = stream.read_to_end(&mut out);
        read.map(|_| String::from_utf8_lossy(&out).into_owned())
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap();
    let took = started.elapsed();
    assert_413(answer);
    assert!(
        took >= Duration::from_millis(300) && took < DRAIN_MAX_TIME / 2,
        "answered after {took:?}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stall_in_a_head_or_a_body_do_not_keep_the_service_from_stopping() {
    for part in [HALF_HEAD, HALF_BODY] {
        let s = patient_server(Duration::from_millis(500)).await;
        let stream = stall(s.addr, part).await;
        // Let the server read what came before it is told to stop.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stopping = Instant::now();
        tokio::time::timeout(Duration::from_secs(10), s.stop())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the service still runs 10 s after the signal with a client stalled at {:?}",
                    String::from_utf8_lossy(part)
                )
            });
        assert!(stopping.elapsed() < Duration::from_secs(5));
        drop(stream);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stalled_in_its_head_is_let_go_at_the_stop_without_waiting_out_the_client_timeout()
{
    let s = patient_server(Duration::from_secs(30)).await;
    let mut stream = stall(s.addr, b"GET /hea").await;
    // Let the server read what came before it is told to stop.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopping = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), s.stop())
        .await
        .expect("the service still runs 20 s after the signal with a client stalled in its head");
    assert!(
        stopping.elapsed() < Duration::from_secs(3),
        "{:?}",
        stopping.elapsed()
    );
    // The client finds its connection closed, without an answer.
    let read = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        stream.read_to_end(&mut out).map(|_| out)
    })
    .await
    .unwrap();
    assert!(read.is_err() || read.is_ok_and(|out| out.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_trickles_its_body_cannot_hold_off_a_stop_beyond_the_client_timeout() {
    let s = patient_server(Duration::from_millis(500)).await;
    let addr = s.addr;
    // One byte every 100 ms: never a pause of the client timeout, never the whole body.
    let trickle = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream
            .write_all(
                b"POST /v1/plan HTTP/1.1\r\nhost: localhost\r\n\
                  content-type: application/json\r\ncontent-length: 100000\r\n\r\n",
            )
            .unwrap();
        for _ in 0..200 {
            std::thread::sleep(Duration::from_millis(100));
            if stream.write_all(b" ").is_err() {
                break;
            }
        }
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let stopping = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), s.stop())
        .await
        .expect("the service still runs 10 s after the signal with a client trickling its body");
    assert!(
        stopping.elapsed() < Duration::from_secs(3),
        "{:?}",
        stopping.elapsed()
    );
    let answer = trickle.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(
        answer.contains("urn:memplan:problem:shutting-down"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_answers_cannot_hold_off_a_stop_for_ever() {
    let s = server_with(Config {
        client_timeout: Duration::from_millis(300),
        default_time_limit: Duration::from_millis(500),
        sync_time_limit_cap: Duration::from_millis(500),
        ..config(None)
    })
    .await;
    let addr = s.addr;
    // Many pipelined requests for a large answer, none of it read: the server's writes
    // fill the socket buffers and block.
    let stream = tokio::task::spawn_blocking(move || {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.connect(&addr.into()).unwrap();
        let mut stream: std::net::TcpStream = socket.into();
        stream
            .set_write_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        for _ in 0..200 {
            if stream
                .write_all(b"GET /openapi.json HTTP/1.1\r\nhost: localhost\r\n\r\n")
                .is_err()
            {
                break;
            }
        }
        stream
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopping = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), s.stop())
        .await
        .expect("the service still runs 10 s after the signal with a client that reads nothing");
    // The drain (no jobs) and then the bound: 0.5 s + 0.3 s.
    assert!(
        stopping.elapsed() < Duration::from_secs(4),
        "{:?}",
        stopping.elapsed()
    );
    drop(stream);
}
