//! `generate_image {prompt, size?}` and `text_to_speech {text, voice?}` (write: they ask in
//! Default mode): generated files go to the asset store and the answer is
//! `{"asset_id","url","mime_type"}`.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_core::{Tool, ToolContext, ToolError};
use weft_providers::media::{Generated, ImageGenerator, SpeechGenerator};

use crate::args::required_text;
use crate::web::AssetSink;

/// Image sizes the tool accepts.
pub const IMAGE_SIZES: [&str; 6] = [
    "256x256",
    "512x512",
    "1024x1024",
    "1024x1536",
    "1536x1024",
    "auto",
];

pub struct GenerateImage {
    pub images: Arc<ImageGenerator>,
    pub assets: Arc<dyn AssetSink>,
}

pub struct TextToSpeech {
    pub speech: Arc<SpeechGenerator>,
    pub assets: Arc<dyn AssetSink>,
}

/// Keep a generated file for `owner`, made by `source`; the tools' (and route 2's) answer.
pub async fn keep(
    assets: &dyn AssetSink,
    owner: &str,
    kind: &str,
    source: &str,
    generated: Generated,
) -> Result<Value, String> {
    let media_type = generated.media_type.clone();
    let id = assets
        .put(owner, kind, &media_type, source, generated.bytes)
        .await?;
    Ok(json!({"asset_id": id, "url": format!("/assets/{id}"), "mime_type": media_type}))
}

#[async_trait]
impl Tool for GenerateImage {
    weft_core::tool_meta! {
        name: "generate_image",
        description: "Generate an image from a description; returns the image's asset URL (the user sees it).",
        class: Network,
        category: Write,
        parameters: json!({"type": "object", "properties": {
            "prompt": {"type": "string", "description": "What the image shows."},
            "size": {"type": "string", "enum": IMAGE_SIZES}
        }, "required": ["prompt"]}),
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let prompt = required_text(&args, "prompt")?;
        let size = args.get("size").and_then(Value::as_str);
        let generated = self
            .images
            .generate(prompt, size, &ctx.cancel)
            .await
            .map_err(ToolError::model)?;
        keep(
            self.assets.as_ref(),
            &ctx.user_id,
            "image",
            &ctx.tool_call_id,
            generated,
        )
        .await
        .map(|v| v.to_string())
        .map_err(ToolError::model)
    }
}

#[async_trait]
impl Tool for TextToSpeech {
    weft_core::tool_meta! {
        name: "text_to_speech",
        description: "Read text aloud as an audio file; returns the audio's asset URL (the user can play it).",
        class: Network,
        category: Write,
        parameters: json!({"type": "object", "properties": {
            "text": {"type": "string"},
            "voice": {"type": "string"}
        }, "required": ["text"]}),
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let spoken = required_text(&args, "text")?;
        let voice = args.get("voice").and_then(Value::as_str);
        let generated = self
            .speech
            .speak(spoken, voice, &ctx.cancel)
            .await
            .map_err(ToolError::model)?;
        keep(
            self.assets.as_ref(),
            &ctx.user_id,
            "audio",
            &ctx.tool_call_id,
            generated,
        )
        .await
        .map(|v| v.to_string())
        .map_err(ToolError::model)
    }
}

/// `generate_image` and `text_to_speech`, for the generators there are.
pub fn media_tools(
    media: &weft_providers::MediaGenerators,
    assets: &Arc<dyn AssetSink>,
) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    if let Some(images) = &media.images {
        tools.push(Arc::new(GenerateImage {
            images: images.clone(),
            assets: assets.clone(),
        }));
    }
    if let Some(speech) = &media.speech {
        tools.push(Arc::new(TextToSpeech {
            speech: speech.clone(),
            assets: assets.clone(),
        }));
    }
    tools
}
