//! Route 2: `media_generation {"mode":"image","prompt",size?}` or
//! `{"mode":"speech","text",voice?}` generates the file directly, as a turn of the thread:
//! `turn_started`, then a `message` whose content is the generated file as an `image_url` or
//! `audio_url` part (kept as the user's asset), then `chunk {done:true}`. Bad requests are
//! refused before the turn with a clear error; a provider refusal ends the turn `failed`.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use weft_core::{ExecutionMode, HostedTurn, Toolbelt, TurnEnd, TurnOutcome, TurnSpec};
use weft_protocol::{
    AgentConfig, ContentPart, ErrorCode, MediaGeneration, MessageContent, PermissionMode,
};
use weft_providers::media::Generated;
use weft_tools::web::AssetSink;

use super::start::ModeChoice;
use crate::runtime::Runtime;
use weft_frames::Refusal;

/// What to generate.
#[derive(Clone)]
enum Request {
    Image {
        prompt: String,
        size: Option<String>,
    },
    Speech {
        text: String,
        voice: Option<String>,
    },
}

fn field(rest: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    rest.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The request a `media_generation` asks for, or why it cannot be served.
fn request(
    state: &Runtime,
    media: &MediaGeneration,
    content: &MessageContent,
) -> Result<Request, Refusal> {
    let unavailable = |what: &str| Refusal::new(ErrorCode::UnsupportedRoute, what);
    let said = || Some(content.text()).filter(|t| !t.trim().is_empty());
    match media.mode.as_str() {
        "image" => {
            if state.media.images.is_none() {
                return Err(unavailable(
                    "image generation is not configured on this server ([media] image_url)",
                ));
            }
            let prompt = field(&media.rest, "prompt")
                .or_else(said)
                .ok_or_else(|| Refusal::invalid("media_generation.prompt is empty"))?;
            let size = field(&media.rest, "size");
            if let Some(size) = &size {
                if !weft_tools::media::IMAGE_SIZES.contains(&size.as_str()) {
                    return Err(Refusal::invalid(format!(
                        "media_generation.size must be one of {}",
                        weft_tools::media::IMAGE_SIZES.join(", ")
                    )));
                }
            }
            Ok(Request::Image { prompt, size })
        }
        "speech" => {
            if state.media.speech.is_none() {
                return Err(unavailable(
                    "speech generation is not configured on this server ([media] speech_url, or install espeak-ng)",
                ));
            }
            let text = field(&media.rest, "text")
                .or_else(said)
                .ok_or_else(|| Refusal::invalid("media_generation.text is empty"))?;
            Ok(Request::Speech {
                text,
                voice: field(&media.rest, "voice"),
            })
        }
        other => Err(Refusal::invalid(format!(
            "unknown media_generation.mode `{}`: image, speech or chat",
            weft_protocol::clip(other, 32)
        ))),
    }
}

impl Runtime {
    /// Route 2's mode: check the request, then generate it as the turn. The thread shows what
    /// was asked for when the message itself says nothing.
    pub(super) fn media_mode(
        self: &Arc<Self>,
        user: &str,
        media: &MediaGeneration,
        content: &mut MessageContent,
    ) -> Result<ModeChoice, Refusal> {
        let wanted = request(self, media, content)?;
        if content.text().trim().is_empty() {
            let asked = match &wanted {
                Request::Image { prompt, .. } => prompt.clone(),
                Request::Speech { text, .. } => text.clone(),
            };
            *content = MessageContent::Text(asked);
        }
        let (runtime, owner) = (self.clone(), user.to_owned());
        Ok(ModeChoice::Made {
            name: "media",
            make: Box::new(move |_thread_id, message_id| {
                Arc::new(MediaTurn {
                    state: runtime,
                    request: wanted,
                    owner,
                    message_id: message_id.to_owned(),
                }) as Arc<dyn ExecutionMode>
            }),
        })
    }
}

struct MediaTurn {
    state: Arc<Runtime>,
    request: Request,
    owner: String,
    /// The answer's id: its file's source, so the file goes with the thread.
    message_id: String,
}

impl MediaTurn {
    async fn generate(
        &self,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<(Generated, &'static str), String> {
        let media = &self.state.media;
        match &self.request {
            Request::Image { prompt, size } => {
                let images = media.images.as_ref().ok_or("no image generator")?;
                Ok((
                    images.generate(prompt, size.as_deref(), cancel).await?,
                    "image",
                ))
            }
            Request::Speech { text, voice } => {
                let speech = media.speech.as_ref().ok_or("no speech generator")?;
                Ok((speech.speak(text, voice.as_deref(), cancel).await?, "audio"))
            }
        }
    }
}

#[async_trait]
impl ExecutionMode for MediaTurn {
    fn name(&self) -> &str {
        "media"
    }

    fn display_name(&self) -> &str {
        "Media generation"
    }

    fn max_rounds(&self, _config: &AgentConfig) -> u32 {
        1
    }

    fn system_prompt(&self, _tools: &Toolbelt, _mode: PermissionMode, _delegate: bool) -> String {
        String::new()
    }

    async fn run(&self, spec: TurnSpec) -> TurnOutcome {
        let cancel = spec.cancel.clone();
        let hosted = HostedTurn::start(&spec);
        let result = match self.generate(&cancel).await {
            Ok((generated, kind)) => {
                let assets: &dyn AssetSink = self.state.assets.as_ref();
                weft_tools::media::keep(assets, &self.owner, kind, &self.message_id, generated)
                    .await
                    .map(|kept| (kept, kind))
            }
            Err(e) => Err(e),
        };
        match result {
            Ok((kept, kind)) => {
                let url = kept["url"].as_str().unwrap_or_default().to_owned();
                hosted.attach(if kind == "image" {
                    ContentPart::ImageUrl { image_url: url }
                } else {
                    ContentPart::AudioUrl { audio_url: url }
                });
                hosted.finish(Vec::new())
            }
            Err(message) => {
                let mut outcome = hosted.finish(Vec::new());
                if !matches!(outcome.end, TurnEnd::Cancelled) {
                    outcome.end = TurnEnd::Failed(message);
                }
                outcome
            }
        }
    }
}
