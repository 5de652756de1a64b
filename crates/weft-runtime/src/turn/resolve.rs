//! What a turn runs with: its agent (the message's, else the thread's, else the server's),
//! the provider and model, the planner when the agent plans, the model's context window.

use std::sync::Arc;

use weft_core::{PlannerSpec, Provider};
use weft_protocol::{AgentConfig, ChatContext, ErrorCode};
use weft_store::ThreadRow;

use super::request::TurnRequest;
use crate::agents;
use crate::runtime::Runtime;
use weft_frames::Refusal;

/// A turn's agent and model.
pub(super) struct Setup {
    pub agent: Arc<AgentConfig>,
    pub provider_name: String,
    pub provider: Arc<dyn Provider>,
    pub model: String,
    pub planner: Option<PlannerSpec>,
    pub context_window: u64,
    /// What the model is told in the editor context (the open workflow included).
    pub editor_prompt: Option<String>,
}

impl Runtime {
    pub(super) async fn setup(
        &self,
        user: &str,
        request: &TurnRequest,
        existing: Option<&ThreadRow>,
    ) -> Result<Setup, Refusal> {
        let thread_agent = existing.and_then(|row| row.agent.as_deref());
        let agent = agents::resolve(self, user, request.agent.as_deref(), thread_agent).await?;
        self.check_agent_tools(&agent)?;
        let (provider_name, provider, model) = self.pick_model(request, &agent)?;
        let planner = self.planner_of(&agent, &provider, &model)?;
        let editor_prompt = self.editor_prompt(user, &request.context).await?;
        Ok(Setup {
            context_window: self.context_windows.window(&model),
            agent,
            provider_name,
            provider,
            model,
            planner,
            editor_prompt,
        })
    }

    /// The editor's guidance and the workflow it has open: one of the user's own, or the
    /// turn is refused (`workflow_not_found`).
    async fn editor_prompt(
        &self,
        user: &str,
        context: &ChatContext,
    ) -> Result<Option<String>, Refusal> {
        let ChatContext::Editor { workflow_id } = context else {
            return Ok(None);
        };
        if !self.editor_available(context) {
            return Ok(None);
        }
        let open = match workflow_id {
            None => None,
            Some(id) => {
                let row = self
                    .store
                    .workflow(user, id)
                    .await
                    .map_err(Refusal::internal)?;
                let row = row.ok_or_else(|| {
                    Refusal::new(
                        ErrorCode::WorkflowNotFound,
                        format!("chat_context.workflow_id: no workflow `{id}` of yours"),
                    )
                })?;
                Some(weft_services::workflows::saved(&row).map_err(Refusal::internal)?)
            }
        };
        Ok(Some(weft_workflow::editor_prompt(open.as_ref())))
    }

    /// The provider and model of a turn: the message's choice, else the agent's
    /// `provider:model`, else the server's default.
    fn pick_model(
        &self,
        request: &TurnRequest,
        agent: &AgentConfig,
    ) -> Result<(String, Arc<dyn Provider>, String), Refusal> {
        let agent_model = agent.model.as_deref().and_then(weft_protocol::parse_model);
        let wanted = request
            .provider
            .as_deref()
            .or(agent_model.map(|(provider, _)| provider));
        let (name, provider) = self.providers.get(wanted).map_err(Refusal::invalid)?;
        let model = match (&request.model, agent_model) {
            (Some(model), _) => Some(model.as_str()),
            (None, Some((p, model))) if p == name => Some(model),
            _ => None,
        };
        let model = self.providers.model_for(&name, model);
        Ok((name, provider, model))
    }

    /// The planner pre-pass of an agent that plans: `planning_model` (else the executor's
    /// model) and `planning_instructions`.
    fn planner_of(
        &self,
        agent: &AgentConfig,
        provider: &Arc<dyn Provider>,
        model: &str,
    ) -> Result<Option<PlannerSpec>, Refusal> {
        if !agent.planning_enabled {
            return Ok(None);
        }
        let (provider, model) = match agent
            .planning_model
            .as_deref()
            .and_then(weft_protocol::parse_model)
        {
            Some((name, model)) => {
                let (_, provider) = self.providers.get(Some(name)).map_err(|e| {
                    Refusal::new(ErrorCode::InvalidField, format!("planning_model: {e}"))
                })?;
                (provider, model.to_owned())
            }
            None => (provider.clone(), model.to_owned()),
        };
        Ok(Some(PlannerSpec {
            provider,
            model,
            instructions: agent.planning_instructions.clone(),
        }))
    }
}
