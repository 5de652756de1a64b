-- How many tool calls each model response asked for. Calls recorded before this column
-- existed count none.
ALTER TABLE model_calls ADD COLUMN tool_calls BIGINT NOT NULL DEFAULT 0;
