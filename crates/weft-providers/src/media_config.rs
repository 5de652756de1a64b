//! `[media]`: which image and speech generators this server has (OpenAI-compatible APIs, or
//! `espeak-ng` for speech offline).

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::media::{ImageGenerator, MediaApi, SpeechGenerator};
use crate::HttpOptions;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct MediaConfig {
    /// Base URL of an OpenAI-compatible Images API (`…/v1`); absent: no image generation.
    pub image_url: Option<String>,
    pub image_api_key: Option<String>,
    pub image_model: String,
    /// Base URL of an OpenAI-compatible speech API; absent: `espeak-ng` if installed.
    pub speech_url: Option<String>,
    pub speech_api_key: Option<String>,
    pub speech_model: String,
    pub voice: String,
    /// The offline speech backend.
    pub espeak: PathBuf,
    pub espeak_voice: String,
    pub timeout_ms: u64,
    pub max_retries: usize,
}

impl Default for MediaConfig {
    fn default() -> Self {
        MediaConfig {
            image_url: None,
            image_api_key: None,
            image_model: "gpt-image-1".to_owned(),
            speech_url: None,
            speech_api_key: None,
            speech_model: "gpt-4o-mini-tts".to_owned(),
            voice: "alloy".to_owned(),
            espeak: PathBuf::from("/usr/bin/espeak-ng"),
            espeak_voice: "en".to_owned(),
            timeout_ms: 120_000,
            max_retries: 3,
        }
    }
}

/// The generators `[media]` describes.
pub struct MediaGenerators {
    pub images: Option<Arc<ImageGenerator>>,
    pub speech: Option<Arc<SpeechGenerator>>,
}

impl MediaGenerators {
    pub fn from_config(config: &MediaConfig) -> Result<MediaGenerators, String> {
        let options = HttpOptions {
            read_timeout: std::time::Duration::from_millis(config.timeout_ms),
            max_retries: config.max_retries,
            ..HttpOptions::default()
        };
        let api = |url: &String, key: &Option<String>, model: &String| MediaApi {
            url: url.clone(),
            api_key: key.clone(),
            model: model.clone(),
            options: options.clone(),
        };
        let images = match &config.image_url {
            Some(url) => Some(Arc::new(ImageGenerator::new(api(
                url,
                &config.image_api_key,
                &config.image_model,
            ))?)),
            None => None,
        };
        let speech = match &config.speech_url {
            Some(url) => Some(Arc::new(SpeechGenerator::api(
                api(url, &config.speech_api_key, &config.speech_model),
                config.voice.clone(),
            )?)),
            None if config.espeak.exists() => Some(Arc::new(SpeechGenerator::Espeak {
                path: config.espeak.clone(),
                voice: config.espeak_voice.clone(),
            })),
            None => None,
        };
        Ok(MediaGenerators { images, speech })
    }
}
