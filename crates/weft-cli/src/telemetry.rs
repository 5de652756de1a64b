//! Logging and traces: the log to stdout (`RUST_LOG`), and — when `[telemetry] otlp_endpoint`
//! (or `OTEL_EXPORTER_OTLP_ENDPOINT`) is set — the GenAI spans exported over OTLP/HTTP.

use anyhow::Context;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;
use weft_runtime::config::TelemetryConfig;

/// Exports spans until dropped, then sends what is left.
pub struct Traces(SdkTracerProvider);

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("the last traces could not be sent: {e}");
        }
    }
}

/// `RUST_LOG`, by default `info` (sqlx: `warn`).
fn env_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,sqlx=warn".into())
}

/// `RUST_LOG` (default `info`), never the GenAI spans: they are for the exporter, and would
/// otherwise prefix every log line inside a turn (and cost a formatted span each).
fn log_filter() -> EnvFilter {
    let filter = env_filter();
    match format!("{}=off", weft_core::telemetry::TARGET).parse() {
        Ok(off) => filter.add_directive(off),
        Err(_) => filter,
    }
}

/// The log alone (every command but `serve` with traces).
pub fn init_log() {
    tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .init();
}

/// The log, and the GenAI spans exported when `config` names an endpoint.
pub fn init(config: &TelemetryConfig) -> anyhow::Result<Option<Traces>> {
    if config.otlp_endpoint.is_empty() {
        init_log();
        return Ok(None);
    }
    // `RUST_LOG` filters globally (as an `EnvFilter` per layer it dropped some events, such
    // as "listening on", depending on what had been logged before), the GenAI spans let
    // through for the exporter alone.
    let everything = match format!("{}=info", weft_core::telemetry::TARGET).parse() {
        Ok(spans) => env_filter().add_directive(spans),
        Err(_) => env_filter(),
    };
    let log = tracing_subscriber::fmt::layer().with_filter(tracing_subscriber::filter::filter_fn(
        |meta| meta.target() != weft_core::telemetry::TARGET,
    ));
    weft_core::telemetry::set_capture_content(config.capture_content);
    let endpoint = config.otlp_endpoint.trim_end_matches('/');
    let endpoint = if endpoint.ends_with("/v1/traces") {
        endpoint.to_owned()
    } else {
        format!("{endpoint}/v1/traces")
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(&endpoint)
        .build()
        .with_context(|| format!("cannot export traces to {endpoint}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(config.service_name.clone())
                .build(),
        )
        .build();
    // Only the GenAI spans go out: not the log's events, not other crates' spans.
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("weft"))
        .with_filter(
            Targets::new().with_target(weft_core::telemetry::TARGET, tracing::Level::INFO),
        );
    tracing_subscriber::registry()
        .with(everything)
        .with(log)
        .with(spans)
        .init();
    tracing::info!(%endpoint, capture_content = config.capture_content, "exporting traces");
    Ok(Some(Traces(provider)))
}
