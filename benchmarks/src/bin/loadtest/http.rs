//! One client's HTTP/1.1 keep-alive connection (hyper), reopened when the server closed it
//! before a request was sent, and server-sent events read from a response.

use anyhow::{bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A finished answer.
#[derive(Debug)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Answer {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The start of the body, for messages.
    pub fn snippet(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        text.chars().take(300).collect()
    }
}

/// One keep-alive connection to `addr`.
pub struct Conn {
    addr: String,
    token: Option<String>,
    sender: Option<SendRequest<Full<Bytes>>>,
    /// Connections opened (more than one: the server had closed the previous one, or a
    /// request on it failed).
    pub opened: usize,
    /// Responses received (heads).
    pub answered: usize,
}

async fn open(addr: &str) -> Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

impl Conn {
    /// A connection to `addr` (`HOST:PORT`), opened now; `token` goes in every request's
    /// `Authorization: Bearer` header.
    pub async fn connect(addr: &str, token: Option<String>) -> Result<Conn> {
        let sender = open(addr).await?;
        Ok(Conn {
            addr: addr.to_string(),
            token,
            sender: Some(sender),
            opened: 1,
            answered: 0,
        })
    }

    /// A connection that opens on its first request (after a failed [`Conn::connect`]).
    pub fn unopened(addr: &str, token: Option<String>) -> Conn {
        Conn {
            addr: addr.to_string(),
            token,
            sender: None,
            opened: 0,
            answered: 0,
        }
    }

    fn build(
        &self,
        method: &Method,
        path: &str,
        body: &Option<Bytes>,
    ) -> Result<Request<Full<Bytes>>> {
        let mut req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(HOST, &self.addr);
        if let Some(t) = &self.token {
            req = req.header(AUTHORIZATION, format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header(CONTENT_TYPE, "application/json");
        }
        Ok(req.body(Full::new(body.clone().unwrap_or_default()))?)
    }

    /// Sends a request and returns the response head (the body still to read). A request
    /// that never left (the connection had been closed) is sent again on a new connection;
    /// one that left and got no answer is an error, and the connection is dropped.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Response<Incoming>> {
        let mut req = self.build(&method, path, &body)?;
        for _ in 0..3 {
            let sender = match self.sender.as_mut() {
                Some(s) if !s.is_closed() => s,
                _ => {
                    self.sender = None;
                    self.opened += 1;
                    self.sender = Some(open(&self.addr).await?);
                    self.sender.as_mut().context("just opened")?
                }
            };
            if sender.ready().await.is_err() {
                self.sender = None;
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    self.answered += 1;
                    return Ok(resp);
                }
                Err(mut e) => {
                    self.sender = None;
                    match e.take_message() {
                        // Never sent: safe to send again.
                        Some(r) => req = r,
                        None => {
                            return Err(anyhow::Error::new(e.into_error())
                                .context(format!("{method} {path}: no answer")))
                        }
                    }
                }
            }
        }
        bail!("{method} {path}: could not be sent on 3 fresh connections")
    }

    /// Sends a request and reads the whole answer.
    pub async fn request(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Answer> {
        let resp = self.send(method.clone(), path, body).await?;
        let status = resp.status();
        let headers = resp.headers().clone();
        match resp.into_body().collect().await {
            Ok(b) => Ok(Answer {
                status,
                headers,
                body: b.to_bytes(),
            }),
            Err(e) => {
                self.sender = None;
                Err(anyhow::Error::new(e).context(format!("{method} {path}: reading the body")))
            }
        }
    }

    /// Forgets the connection (after a response whose body was not read to the end).
    pub fn drop_connection(&mut self) {
        self.sender = None;
    }
}

/// One server-sent event.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Event {
    /// `event:` (empty: `message`).
    pub name: String,
    /// `data:` lines joined with newlines.
    pub data: String,
}

/// Reads the events of an event-stream body one by one.
pub struct EventReader {
    body: Incoming,
    buf: String,
    /// The body ended.
    pub ended: bool,
}

impl EventReader {
    /// Reads `body` (a `text/event-stream` response's).
    pub fn new(body: Incoming) -> Self {
        EventReader {
            body,
            buf: String::new(),
            ended: false,
        }
    }

    /// The next event, `None` at the end of the body. Comments (keep-alives) are skipped.
    pub async fn next(&mut self) -> Result<Option<Event>> {
        loop {
            let normalised = self.buf.replace("\r\n", "\n");
            if let Some(end) = normalised.find("\n\n") {
                let block = normalised[..end].to_string();
                self.buf = normalised[end + 2..].to_string();
                let mut ev = Event::default();
                let mut any = false;
                for line in block.lines() {
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match field {
                        "event" => (ev.name, any) = (value.to_string(), true),
                        "data" => {
                            if !ev.data.is_empty() {
                                ev.data.push('\n');
                            }
                            ev.data.push_str(value);
                            any = true;
                        }
                        _ => {}
                    }
                }
                if any {
                    return Ok(Some(ev));
                }
                continue;
            }
            match self.body.frame().await {
                None => {
                    self.ended = true;
                    return Ok(None);
                }
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        self.buf.push_str(&String::from_utf8_lossy(&data));
                    }
                }
            }
        }
    }
}
