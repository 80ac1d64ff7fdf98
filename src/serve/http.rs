//! The HTTP side of `torchtop serve`: accepts connections (TLS when configured), checks basic
//! auth, and answers `/metrics` from the newest snapshot. Nothing here calls the driver: a
//! scrape reads an `Arc<Snapshot>` out of a watch channel and encodes it.
//!
//! Bounds, since any local user can connect: at most [`MAX_CONNECTIONS`] at once (a new one
//! closes the one that matters least, [`super::connections`]), request heads of at most 16 KiB
//! read within 10 s, a TLS handshake within 10 s, and a connection closed after
//! [`CONNECTION_LIFETIME`] (Prometheus reconnects at its next scrape).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ACCEPT, ALLOW, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::connections::{Activity, Registry, MAX_CONNECTIONS};
use super::exposition::Format;
use super::torchtop::OwnFigures;
use super::webconfig::{BasicAuth, WebConfig};
use crate::model::Snapshot;

const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// What every request handler reads.
pub(crate) struct Shared {
    pub(crate) snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    pub(crate) hostname: Option<String>,
    pub(crate) expose_commands: bool,
    pub(crate) auth: Option<Arc<BasicAuth>>,
}

type Reply = Response<Full<Bytes>>;

/// Accepts connections until the listener fails for good; each runs on a task of its own.
pub(crate) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, web: WebConfig) {
    let registry = Registry::new(MAX_CONNECTIONS);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors and the like: wait a little rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        let tls = web.tls.clone();
        // When every connection is answering a request, the new one is dropped (closed).
        registry.admit(move |slot| {
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let activity = slot.activity.clone();
                match tls {
                    Some(acceptor) => {
                        let handshake =
                            tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                        if let Ok(Ok(stream)) = handshake {
                            serve_connection(TokioIo::new(stream), shared, activity).await;
                        }
                    }
                    None => serve_connection(TokioIo::new(stream), shared, activity).await,
                }
                drop(slot);
            })
            .abort_handle()
        });
    }
}

async fn serve_connection<I>(io: I, shared: Arc<Shared>, activity: Arc<Activity>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let shared = shared.clone();
        let busy = activity.request();
        async move {
            let reply = handle(request, &shared).await;
            drop(busy);
            Ok::<_, Infallible>(reply)
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(io, service);
    let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
}

fn plain(status: StatusCode, text: &str) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::from(format!("{text}\n"))));
    *reply.status_mut() = status;
    reply.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    reply
}

async fn handle(request: Request<Incoming>, shared: &Shared) -> Reply {
    let started = Instant::now();
    if let Some(auth) = &shared.auth {
        if !authorized(&request, auth).await {
            let mut reply = plain(
                StatusCode::UNAUTHORIZED,
                "Unauthorized: this exporter needs the user and password from its web config.",
            );
            reply.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"torchtop\""),
            );
            return reply;
        }
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut reply = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "Only GET and HEAD are served here.",
        );
        reply
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return reply;
    }
    match request.uri().path() {
        "/metrics" => metrics(&request, shared, started),
        "/" => plain(
            StatusCode::OK,
            "torchtop exporter: the metrics are at /metrics.",
        ),
        _ => plain(
            StatusCode::NOT_FOUND,
            "Not found: the metrics are at /metrics.",
        ),
    }
}

fn metrics(request: &Request<Incoming>, shared: &Shared, started: Instant) -> Reply {
    let Some(snapshot) = shared.snapshots.borrow().clone() else {
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "torchtop has not taken its first sample yet; try again in a second.",
        );
    };
    let accept = request.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    let own = OwnFigures::at_scrape(&snapshot);
    let body = super::encode_with_timing(
        &snapshot,
        shared.hostname.as_deref(),
        shared.expose_commands,
        format,
        own,
        started,
    );
    let mut reply = Response::new(Full::new(Bytes::from(body)));
    reply.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    reply
}

/// Whether the request carries a user and password the web config allows. bcrypt runs on the
/// blocking pool, one at a time, so that a slow login never holds up other scrapes.
async fn authorized(request: &Request<Incoming>, auth: &Arc<BasicAuth>) -> bool {
    let Some((user, password)) = credentials(request) else {
        return false;
    };
    auth.allows(user, password).await
}

fn credentials(request: &Request<Incoming>) -> Option<(String, String)> {
    let header = request.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = header.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}
