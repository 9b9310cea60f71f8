//! OpenTelemetry traces (issue 17 §4): one span per client request, exported over OTLP/HTTP
//! (protobuf) with the official crates (`opentelemetry-otlp`'s span exporter on hyper).
//!
//! Off unless `[supervisor] otel_endpoint` is set ([`crate::config::OtelConfig`]); off, the
//! actor keeps no span and changes no message ([`enabled`] is one atomic load at actor start).
//!
//! On: the actor opens a [`SpanStart`] with a request's ledger entry (arrival, parent from
//! `params._meta.traceparent`, which the HTTP front fills from the `traceparent` header when
//! the body has none), writes the span's own context into the `_meta.traceparent` of the
//! request it forwards to the child, and at the request's one outcome builds the span
//! ([`span_data`]) and hands it to the export thread with [`submit`], which never waits: the
//! queue holds [`QUEUE`] spans and a full queue drops and counts
//! (`mcp_supervisor_trace_spans_dropped_total`). The export thread batches ([`MAX_BATCH`]
//! spans or [`BATCH_DELAY`]) and posts on its own current-thread runtime; [`flush`] at exit
//! waits for the queued spans with a deadline.
//!
//! No clock is read here: start and end times are the actor's `self.wall`.

pub mod context;

pub use context::TraceParent;

use crate::config::OtelConfig;
use crate::logging::requests::RequestId;
use crate::observe::Outcome;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;

/// The `_meta` key of the W3C `traceparent` (protocol.md lists it among `_meta` keys; the
/// OpenTelemetry MCP conventions, "Context propagation", put trace context in `params._meta`).
pub const META_TRACEPARENT: &str = "traceparent";
/// The `_meta` key of the W3C `tracestate`.
pub const META_TRACESTATE: &str = "tracestate";

/// Spans waiting for the export thread (the OpenTelemetry SDK's `OTEL_BSP_MAX_QUEUE_SIZE`
/// default); beyond it spans are dropped and counted.
pub const QUEUE: usize = 2048;
/// Spans per export request (the SDK's `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` default).
pub const MAX_BATCH: usize = 512;
/// How long the first span of a batch waits for others before the batch is sent.
pub const BATCH_DELAY: Duration = Duration::from_secs(1);

/// What a traced request's ledger entry keeps from arrival to its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanStart {
    /// The span's own context: the parent's trace id (or a new one), a new span id, and the
    /// parent's flags (or `sampled`). Written to the child as `_meta.traceparent`.
    pub own: TraceParent,
    /// The client's span (remote parent), when the request named a valid one.
    pub parent: Option<[u8; 8]>,
    /// The client's `tracestate`, passed on to the child unchanged and kept on the span.
    pub tracestate: Option<Box<str>>,
    /// Arrival (the actor's wall clock).
    pub start: SystemTime,
    /// `mcp.protocol.version`: the envelope's version of a 2026-07-28 request.
    pub version: Option<Box<str>>,
    /// The prompt name of `prompts/get` (`gen_ai.prompt.name`); a tool's name comes from the
    /// ledger's `tool`.
    pub prompt: Option<Box<str>>,
}

impl SpanStart {
    /// The span of a request with `params` and `method` arriving at `start`, with random
    /// ids. Its parent is `params._meta.traceparent` (with `tracestate`) when valid; an
    /// absent or invalid one starts a new trace (never an error, W3C §4.3).
    pub fn new(params: Option<&RawValue>, method: &str, start: SystemTime) -> SpanStart {
        let meta = vocab::protocol::meta_strings(
            params,
            [
                META_TRACEPARENT,
                META_TRACESTATE,
                vocab::protocol::META_VERSION,
            ],
        );
        let [traceparent, tracestate, version] = meta;
        let parent = traceparent.as_deref().and_then(TraceParent::parse);
        let prompt = (method == "prompts/get")
            .then(|| vocab::protocol::param_string(params, "name"))
            .flatten()
            .map(Into::into);
        Self::with_ids(
            parent,
            tracestate.as_deref(),
            random_span_id(),
            random_trace_id(),
            start,
        )
        .with(version.map(Into::into), prompt)
    }

    /// [`SpanStart::new`] with its ids given: `span_id` is ours, `trace_id` is used only
    /// when there is no `parent`. A request without a parent is sampled (every span is
    /// exported); one with a parent follows its `sampled` flag (the SDK's default
    /// `ParentBased(AlwaysOn)` sampler).
    pub fn with_ids(
        parent: Option<TraceParent>,
        tracestate: Option<&str>,
        span_id: [u8; 8],
        trace_id: [u8; 16],
        start: SystemTime,
    ) -> SpanStart {
        let own = TraceParent {
            trace_id: parent.map_or(trace_id, |p| p.trace_id),
            span_id,
            flags: parent.map_or(context::SAMPLED, |p| p.flags),
        };
        SpanStart {
            own,
            parent: parent.map(|p| p.span_id),
            // A `tracestate` belongs to its `traceparent`: without a valid parent it is dropped.
            tracestate: parent
                .and(tracestate)
                .and_then(context::tracestate)
                .map(Into::into),
            start,
            version: None,
            prompt: None,
        }
    }

    fn with(mut self, version: Option<Box<str>>, prompt: Option<Box<str>>) -> SpanStart {
        self.version = version;
        self.prompt = prompt;
        self
    }

    /// The `_meta` members the child gets: our span as `traceparent`, and the client's
    /// `tracestate` when there was one.
    pub fn meta(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert(META_TRACEPARENT.into(), self.own.format().into());
        if let Some(s) = &self.tracestate {
            m.insert(META_TRACESTATE.into(), s.to_string().into());
        }
        m
    }
}

/// How a traced request ended: the request log's fields (`logging::requests::Record`).
#[derive(Debug)]
pub struct Finish<'a> {
    /// The server's name.
    pub server: &'a str,
    /// The endpoint the client came through (issue 31 §7), if any.
    pub endpoint: Option<&'a str>,
    /// The supervisor's `request_id`.
    pub rid: RequestId,
    /// The method.
    pub method: &'a str,
    /// The client's JSON-RPC id as text (`1`, `"a"`).
    pub id: &'a str,
    /// The tool of `tools/call`.
    pub tool: Option<&'a str>,
    /// The outcome.
    pub outcome: Outcome,
    /// The JSON-RPC error code answered, if any.
    pub code: Option<i64>,
    /// When the answer was made (the actor's wall clock).
    pub end: SystemTime,
}

/// The span of a request, kind `Server`, named as the OpenTelemetry MCP semantic conventions
/// say (`{mcp.method.name} {target}`, the target being the tool or prompt name), with their
/// attributes (`mcp.method.name`, `jsonrpc.request.id`, `gen_ai.tool.name`,
/// `gen_ai.operation.name`, `gen_ai.prompt.name`, `mcp.protocol.version`, `error.type`,
/// `rpc.response.status_code`) and ours (`mcp_supervisor.server`, `.endpoint` for a client of
/// an endpoint, `.request_id`, `.outcome`). Status `Error` for every outcome but `ok` and `cancelled` (the client gave
/// up: not the server's error); `error.type` is the JSON-RPC code when there was one, else
/// the outcome.
pub fn span_data(s: SpanStart, f: Finish<'_>) -> SpanData {
    let target = f.tool.or(s.prompt.as_deref());
    let name: Cow<'static, str> = match target {
        Some(t) => format!("{} {t}", f.method).into(),
        None => f.method.to_string().into(),
    };
    let mut attributes = Vec::with_capacity(12);
    attributes.push(KeyValue::new("mcp.method.name", f.method.to_string()));
    let id = serde_json::from_str::<String>(f.id).unwrap_or_else(|_| f.id.to_string());
    attributes.push(KeyValue::new("jsonrpc.request.id", id));
    if let Some(t) = f.tool {
        attributes.push(KeyValue::new("gen_ai.tool.name", t.to_string()));
        attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
    }
    if let Some(p) = &s.prompt {
        attributes.push(KeyValue::new("gen_ai.prompt.name", p.to_string()));
    }
    if let Some(v) = &s.version {
        attributes.push(KeyValue::new("mcp.protocol.version", v.to_string()));
    }
    attributes.push(KeyValue::new("mcp_supervisor.server", f.server.to_string()));
    if let Some(e) = f.endpoint {
        attributes.push(KeyValue::new("mcp_supervisor.endpoint", e.to_string()));
    }
    attributes.push(KeyValue::new(
        "mcp_supervisor.request_id",
        f.rid.to_string(),
    ));
    attributes.push(KeyValue::new("mcp_supervisor.outcome", f.outcome.as_str()));
    if let Some(c) = f.code {
        attributes.push(KeyValue::new("rpc.response.status_code", c.to_string()));
    }
    let status = match f.outcome {
        Outcome::Ok | Outcome::Cancelled => Status::Unset,
        other => {
            let error = f
                .code
                .map_or_else(|| other.as_str().to_string(), |c| c.to_string());
            attributes.push(KeyValue::new("error.type", error));
            Status::error(other.as_str())
        }
    };
    let state = s
        .tracestate
        .as_deref()
        .and_then(|t| t.parse::<TraceState>().ok())
        .unwrap_or_default();
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(s.own.trace_id),
            SpanId::from_bytes(s.own.span_id),
            TraceFlags::new(s.own.flags),
            false,
            state,
        ),
        parent_span_id: s.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: s.parent.is_some(),
        span_kind: SpanKind::Server,
        name,
        start_time: s.start,
        end_time: f.end.max(s.start),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope().clone(),
    }
}

fn scope() -> &'static InstrumentationScope {
    static SCOPE: OnceLock<InstrumentationScope> = OnceLock::new();
    SCOPE.get_or_init(|| {
        InstrumentationScope::builder("mcp-supervisor")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build()
    })
}

fn random_span_id() -> [u8; 8] {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

fn random_trace_id() -> [u8; 16] {
    loop {
        let id: u128 = rand::random();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

enum Msg {
    Span(Box<SpanData>),
    Flush(std::sync::mpsc::Sender<()>),
}

static SINK: OnceLock<mpsc::Sender<Msg>> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Whether traces are on (the daemon called [`start`]).
pub fn enabled() -> bool {
    SINK.get().is_some()
}

/// Spans lost since the start: the queue was full, or their export failed (the metric
/// `mcp_supervisor_trace_spans_dropped_total`).
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Hands a finished span to the export thread without waiting; drops and counts it when the
/// queue is full or traces are off. A span whose context is not sampled is not exported.
pub fn submit(span: SpanData) {
    if !span.span_context.is_sampled() {
        return;
    }
    let Some(tx) = SINK.get() else { return };
    if tx.try_send(Msg::Span(Box::new(span))).is_err() {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Builds the OTLP exporter for `cfg` and starts the export thread. Called once, by the
/// daemon at start (a second call changes nothing: the settings are read at start only).
/// Errors: the exporter cannot be built (an invalid header from `OTEL_EXPORTER_OTLP_*`), or
/// the thread cannot be started.
pub fn start(cfg: &OtelConfig) -> anyhow::Result<()> {
    use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
    if enabled() {
        return Ok(());
    }
    let service = cfg
        .service_name
        .clone()
        .or_else(|| std::env::var("OTEL_SERVICE_NAME").ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "mcp-supervisor".to_string());
    // `Resource::builder` reads `OTEL_RESOURCE_ATTRIBUTES` and adds `telemetry.sdk.*`.
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service)
        .build();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(cfg.traces_url.clone())
        .with_protocol(Protocol::HttpBinary)
        .with_headers(cfg.headers.iter().cloned().collect())
        .build()?;
    exporter.set_resource(&resource);
    let (tx, rx) = mpsc::channel(QUEUE);
    let url = cfg.traces_url.clone();
    std::thread::Builder::new()
        .name("otel-export".into())
        .spawn(move || run(exporter, rx, url))?;
    let _ = SINK.set(tx);
    tracing::info!(endpoint = %cfg.traces_url, "exporting OpenTelemetry traces");
    Ok(())
}

/// Sends every span queued so far, waiting at most `timeout` (called before the process
/// exits, so the last requests' spans are not lost to an exit).
pub fn flush(timeout: Duration) {
    let Some(tx) = SINK.get() else { return };
    let deadline = base::deadline::after(std::time::Instant::now(), timeout);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let mut msg = Msg::Flush(done_tx);
    // The queue may be full: retry until the thread makes room, within the deadline.
    loop {
        match tx.try_send(msg) {
            Ok(()) => break,
            Err(mpsc::error::TrySendError::Full(back)) if std::time::Instant::now() < deadline => {
                msg = back;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return,
        }
    }
    let _ = done_rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()));
}

/// The export thread: gathers a batch ([`MAX_BATCH`] spans, or what came within
/// [`BATCH_DELAY`] of its first), posts it, repeats. A failed export drops its spans (counted,
/// logged at most once a minute); the exporter's own timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`,
/// default 10 s) bounds each post.
fn run(exporter: opentelemetry_otlp::SpanExporter, mut rx: mpsc::Receiver<Msg>, url: String) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the trace export runtime; spans are dropped");
            rx.close();
            return;
        }
    };
    rt.block_on(async move {
        let mut batch: Vec<SpanData> = Vec::new();
        let mut due = tokio::time::Instant::now();
        let mut warned: Option<tokio::time::Instant> = None;
        loop {
            let msg = if batch.is_empty() {
                rx.recv().await
            } else {
                match tokio::time::timeout_at(due, rx.recv()).await {
                    Ok(m) => m,
                    Err(_) => {
                        export(&exporter, &url, &mut warned, std::mem::take(&mut batch)).await;
                        continue;
                    }
                }
            };
            match msg {
                Some(Msg::Span(s)) => {
                    if batch.is_empty() {
                        due = base::deadline::after_tokio(tokio::time::Instant::now(), BATCH_DELAY);
                    }
                    batch.push(*s);
                    if batch.len() >= MAX_BATCH {
                        export(&exporter, &url, &mut warned, std::mem::take(&mut batch)).await;
                    }
                }
                Some(Msg::Flush(ack)) => {
                    export(&exporter, &url, &mut warned, std::mem::take(&mut batch)).await;
                    let _ = ack.send(());
                }
                None => {
                    export(&exporter, &url, &mut warned, std::mem::take(&mut batch)).await;
                    break;
                }
            }
        }
    });
}

/// Posts one batch; a failure drops and counts its spans, with a warning at most once a
/// minute (`warned`: when the last one was written).
async fn export(
    exporter: &opentelemetry_otlp::SpanExporter,
    url: &str,
    warned: &mut Option<tokio::time::Instant>,
    batch: Vec<SpanData>,
) {
    if batch.is_empty() {
        return;
    }
    let n = batch.len();
    if let Err(e) = exporter.export(batch).await {
        DROPPED.fetch_add(n as u64, Ordering::Relaxed);
        let now = tokio::time::Instant::now();
        if warned.is_none_or(|w| now.duration_since(w) >= Duration::from_secs(60)) {
            *warned = Some(now);
            tracing::warn!(endpoint = %url, spans = n, error = %e, "cannot export spans; they are dropped (counted in mcp_supervisor_trace_spans_dropped_total; the next such warning comes a minute later at the earliest)");
        }
    }
}

#[cfg(test)]
mod tests;
