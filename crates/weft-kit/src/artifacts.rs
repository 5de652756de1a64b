//! Where a tool result too large for the model is kept whole (an artifact the model can page
//! through with `read_artifact`).

use async_trait::async_trait;

#[async_trait]
pub trait Artifacts: Send + Sync {
    /// Keep `content`, the whole result of `tool_call_id`, for `user`; the artifact's id.
    async fn offload(
        &self,
        user: &str,
        tool_call_id: &str,
        content: &str,
    ) -> Result<String, String>;
}
