//! What both HTTP adapters share: client options, sending with retries (exponential backoff
//! with jitter via `backon`, honouring `Retry-After`), error classification, an idle timeout
//! on the body, and SSE framing via `eventsource-stream`.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use eventsource_stream::{Event, Eventsource};
use futures::stream::{BoxStream, StreamExt};
use reqwest::{RequestBuilder, Response, StatusCode};
use tokio_util::sync::CancellationToken;
use weft_core::ProviderError;

/// Timeouts and retry policy for one provider.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub connect_timeout: Duration,
    /// Longest silence allowed between two chunks of a streamed body.
    pub read_timeout: Duration,
    /// Retries after the first attempt (429, 5xx, overloaded).
    pub max_retries: usize,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(120),
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
        }
    }
}

impl HttpOptions {
    pub fn client(&self) -> Result<reqwest::Client, ProviderError> {
        reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .build()
            .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {e}")))
    }
}

/// One failed attempt, with what the server asked us to wait.
#[derive(Debug)]
struct Attempt {
    error: ProviderError,
    retryable: bool,
    retry_after: Option<Duration>,
}

fn retryable_status(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() || status.as_u16() == 529
}

fn retry_after(response: &Response) -> Option<Duration> {
    let value = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| *s >= 0.0)
        .map(Duration::from_secs_f64)
}

async fn attempt(
    build: &(dyn Fn() -> RequestBuilder + Send + Sync),
    read_timeout: Duration,
) -> Result<Response, Attempt> {
    let response = tokio::time::timeout(read_timeout, build().send())
        .await
        .map_err(|_| Attempt {
            retryable: true,
            error: ProviderError::Timeout(format!("no response headers within {read_timeout:?}")),
            retry_after: None,
        })?;
    let response = response.map_err(|e| Attempt {
        retryable: e.is_connect() || e.is_timeout(),
        error: if e.is_timeout() {
            ProviderError::Timeout(e.to_string())
        } else {
            ProviderError::Transport(e.to_string())
        },
        retry_after: None,
    })?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let wait = retry_after(&response);
    let body = response.text().await.unwrap_or_default();
    let message: String = body.chars().take(500).collect();
    Err(Attempt {
        retryable: retryable_status(status) || body.contains("overloaded"),
        error: ProviderError::Http {
            status: status.as_u16(),
            message,
        },
        retry_after: wait,
    })
}

/// Send the request built by `build`, retrying what is worth retrying; 401/403 and other
/// client errors fail at once. Cancelling `cancel` abandons the request.
pub async fn send(
    build: &(dyn Fn() -> RequestBuilder + Send + Sync),
    options: &HttpOptions,
    cancel: &CancellationToken,
) -> Result<Response, ProviderError> {
    let policy = ExponentialBuilder::default()
        .with_min_delay(options.initial_backoff)
        .with_max_delay(options.max_backoff)
        .with_max_times(options.max_retries)
        .with_jitter();
    let sending = (|| attempt(build, options.read_timeout))
        .retry(policy)
        .sleep(tokio::time::sleep)
        .when(|a: &Attempt| a.retryable)
        .adjust(
            |a: &Attempt, planned: Option<Duration>| match (a.retry_after, planned) {
                // Honour Retry-After, but never retry more often than the policy allows.
                (Some(wait), Some(_)) => Some(wait),
                (_, planned) => planned,
            },
        )
        .notify(|a: &Attempt, wait: Duration| {
            tracing::warn!(error = %a.error, ?wait, "provider request failed; retrying");
        });
    tokio::select! {
        result = sending => result.map_err(|a| a.error),
        () = cancel.cancelled() => Err(ProviderError::Other("cancelled".into())),
    }
}

/// The response body as SSE events, each chunk awaited at most `read_timeout`.
pub fn sse(
    response: Response,
    read_timeout: Duration,
) -> BoxStream<'static, Result<Event, ProviderError>> {
    let bytes = response.bytes_stream();
    let guarded = futures::stream::unfold(bytes, move |mut bytes| async move {
        match tokio::time::timeout(read_timeout, bytes.next()).await {
            Ok(Some(chunk)) => Some((
                chunk.map_err(|e| ProviderError::Transport(e.to_string())),
                bytes,
            )),
            Ok(None) => None,
            Err(_) => Some((
                Err(ProviderError::Timeout(format!(
                    "no data for {read_timeout:?}"
                ))),
                bytes,
            )),
        }
    });
    guarded
        .eventsource()
        .map(|event| {
            event.map_err(|e| match e {
                eventsource_stream::EventStreamError::Transport(t) => t,
                other => ProviderError::Protocol(other.to_string()),
            })
        })
        .boxed()
}

/// Where a remote provider is reached: its HTTP client, base URL (no trailing `/`), key and
/// options. Both adapters are built the same way.
pub struct Endpoint {
    pub client: reqwest::Client,
    pub base_url: String,
    pub api_key: Option<String>,
    pub options: HttpOptions,
    /// The models behind it make several tool calls in one response.
    pub parallel_tool_calls: bool,
}

impl Endpoint {
    /// What the models behind this endpoint can do.
    pub fn capabilities(&self) -> weft_core::Capabilities {
        weft_core::Capabilities {
            tools: true,
            parallel_tool_calls: self.parallel_tool_calls,
        }
    }

    /// `base_url` (else `default_base_url`) and `api_key`, with a client for `options`.
    pub fn new(
        default_base_url: &str,
        base_url: Option<&str>,
        api_key: Option<&str>,
        options: HttpOptions,
    ) -> Result<Endpoint, ProviderError> {
        Ok(Endpoint {
            client: options.client()?,
            base_url: base_url
                .unwrap_or(default_base_url)
                .trim_end_matches('/')
                .to_owned(),
            api_key: api_key.map(str::to_owned),
            options,
            parallel_tool_calls: true,
        })
    }
}
