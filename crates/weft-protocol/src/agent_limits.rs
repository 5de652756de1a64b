//! The operator's `[agent]` limits as the ceiling of every stored agent: a limit an agent
//! leaves out is the operator's, one it gives may not be higher, and a stored agent is
//! clamped again when a turn loads it (the operator may have lowered the ceiling since).
//! `max_parallel_subagents` is not among them: it is 1..7 for every agent.

use crate::agent_config::{AgentConfig, AgentConfigError};

/// One limit of a turn: larger is more; `None` is no limit at all.
struct Limit {
    field: &'static str,
    get: fn(&AgentConfig) -> Option<f64>,
    set: fn(&mut AgentConfig, Option<f64>),
}

/// An integer limit that is always set.
macro_rules! always {
    ($field:ident, $ty:ty) => {
        Limit {
            field: stringify!($field),
            get: |c| Some(c.$field as f64),
            set: |c, v| {
                if let Some(v) = v {
                    c.$field = v as $ty;
                }
            },
        }
    };
}

/// A limit where `None` means unlimited.
macro_rules! optional {
    ($field:ident, $ty:ty) => {
        Limit {
            field: stringify!($field),
            get: |c| c.$field.map(|v| v as f64),
            set: |c, v| c.$field = v.map(|v| v as $ty),
        }
    };
}

/// Every limit a stored agent may set, in `AgentConfig`'s order.
const LIMITS: &[Limit] = &[
    optional!(max_tokens, u64),
    always!(max_depth, u32),
    always!(max_iterations_per_level, u32),
    always!(max_parallel_per_turn, usize),
    always!(max_total_subtasks, u64),
    always!(max_total_llm_calls, u64),
    always!(max_total_tool_calls, u64),
    always!(max_wall_clock_ms, u64),
    always!(tool_result_max_bytes, usize),
    always!(read_file_max_bytes, usize),
    always!(max_total_result_bytes, u64),
    always!(max_history_tokens, u64),
    optional!(max_turn_tokens, u64),
    always!(max_output_bytes, u64),
    optional!(max_cost_usd, f64),
    always!(max_schema_retries, u32),
    always!(max_identical_calls, u32),
    optional!(tool_timeout_ms, u64),
    always!(client_tool_timeout_ms, u64),
];

/// Whether `value` is more than `ceiling` allows (`None`: unlimited).
fn above(value: Option<f64>, ceiling: Option<f64>) -> bool {
    match (value, ceiling) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(v), Some(c)) => v > c,
    }
}

fn shown(value: Option<f64>) -> String {
    value.map_or_else(|| "unlimited".to_owned(), |v| v.to_string())
}

impl AgentConfig {
    /// Take every limit `given` does not name from `ceiling` (the operator's `[agent]`).
    pub fn inherit_limits(&mut self, ceiling: &AgentConfig, given: impl Fn(&str) -> bool) {
        for limit in LIMITS {
            if !given(limit.field) {
                (limit.set)(self, (limit.get)(ceiling));
            }
        }
        if !given("max_steps") {
            self.max_steps = ceiling.max_steps;
        }
    }

    /// The first limit above `ceiling`, as an error naming the field.
    pub fn check_within(&self, ceiling: &AgentConfig) -> Result<(), AgentConfigError> {
        for limit in LIMITS {
            let (value, max) = ((limit.get)(self), (limit.get)(ceiling));
            if above(value, max) {
                return Err(AgentConfigError::AboveCeiling {
                    field: limit.field,
                    value: shown(value),
                    ceiling: shown(max),
                });
            }
        }
        let (steps, max) = (self.iterations_per_level(), ceiling.iterations_per_level());
        if steps > max {
            return Err(AgentConfigError::AboveCeiling {
                field: "max_steps",
                value: steps.to_string(),
                ceiling: max.to_string(),
            });
        }
        Ok(())
    }

    /// Lower every limit above `ceiling` to it, and ask before every tool the operator's
    /// `hitl_tools` names (its list is a floor: a stored agent adds to it, never removes
    /// from it); the fields that changed.
    pub fn clamp_to(&mut self, ceiling: &AgentConfig) -> Vec<&'static str> {
        let mut lowered = Vec::new();
        let before = self.hitl_tools.len();
        for tool in &ceiling.hitl_tools {
            if !self.hitl_tools.contains(tool) {
                self.hitl_tools.push(tool.clone());
            }
        }
        if self.hitl_tools.len() > before {
            lowered.push("hitl_tools");
        }
        for limit in LIMITS {
            let max = (limit.get)(ceiling);
            if above((limit.get)(self), max) {
                (limit.set)(self, max);
                lowered.push(limit.field);
            }
        }
        let max = ceiling.iterations_per_level();
        if self.iterations_per_level() > max {
            self.max_steps = Some(max);
            lowered.push("max_steps");
        }
        lowered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operator() -> AgentConfig {
        AgentConfig {
            max_wall_clock_ms: 4_000,
            max_total_tool_calls: 20,
            max_output_bytes: 1 << 20,
            max_cost_usd: Some(0.5),
            ..AgentConfig::default()
        }
    }

    #[test]
    fn omitted_limits_are_the_operators_and_given_ones_stay() {
        let mut agent = AgentConfig {
            max_total_tool_calls: 5,
            max_wall_clock_ms: 999_999,
            ..AgentConfig::default()
        };
        agent.inherit_limits(&operator(), |f| f == "max_total_tool_calls");
        assert_eq!(agent.max_total_tool_calls, 5);
        assert_eq!(agent.max_wall_clock_ms, 4_000);
        assert_eq!(agent.max_cost_usd, Some(0.5));
        assert!(agent.check_within(&operator()).is_ok());
    }

    #[test]
    fn the_operators_hitl_tools_are_a_floor_every_stored_agent_asks_before() {
        let ceiling = AgentConfig {
            hitl_tools: vec!["write_file".into(), "browser".into()],
            ..operator()
        };
        let mut agent = AgentConfig {
            hitl_tools: vec!["browser".into(), "fetch_url".into()],
            ..operator()
        };
        assert_eq!(agent.clamp_to(&ceiling), vec!["hitl_tools"]);
        assert_eq!(agent.hitl_tools, ["browser", "fetch_url", "write_file"]);
        assert!(
            agent.clamp_to(&ceiling).is_empty(),
            "a second clamp changes nothing"
        );
    }

    #[test]
    fn a_limit_above_the_ceiling_names_its_field() {
        let agent = AgentConfig {
            max_total_tool_calls: 1_000,
            ..operator()
        };
        let e = agent.check_within(&operator()).unwrap_err();
        assert_eq!(e.field(), "max_total_tool_calls");
        assert!(e.to_string().contains("20"), "{e}");
        // No cost limit is more than a cost limit.
        let unlimited = AgentConfig {
            max_cost_usd: None,
            ..operator()
        };
        assert_eq!(
            unlimited.check_within(&operator()).unwrap_err().field(),
            "max_cost_usd"
        );
        let steps = AgentConfig {
            max_steps: Some(50),
            ..operator()
        };
        assert_eq!(
            steps.check_within(&operator()).unwrap_err().field(),
            "max_steps"
        );
    }

    #[test]
    fn clamping_lowers_only_what_is_above() {
        let mut agent = AgentConfig {
            max_total_tool_calls: 1_000,
            max_output_bytes: 10,
            max_cost_usd: None,
            max_steps: Some(99),
            ..operator()
        };
        let lowered = agent.clamp_to(&operator());
        assert_eq!(
            lowered,
            vec!["max_total_tool_calls", "max_cost_usd", "max_steps"]
        );
        assert_eq!(agent.max_total_tool_calls, 20);
        assert_eq!(agent.max_output_bytes, 10);
        assert_eq!(agent.max_cost_usd, Some(0.5));
        assert_eq!(agent.max_steps, Some(20));
        assert!(agent.check_within(&operator()).is_ok());
    }
}
