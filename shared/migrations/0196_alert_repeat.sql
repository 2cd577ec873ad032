-- The repeat interval (docs/alerts.md "Repeat interval"; issue 33): a rule that stays firing
-- is announced again every repeat_interval_s seconds (NULL: once). The evaluator's sweep writes
-- a `firing` event with body.repeat = true and sets alert_states.notified_at, in one
-- transaction, so a restart neither loses nor doubles a reminder.
ALTER TABLE alert_rules ADD COLUMN repeat_interval_s integer
    CHECK (repeat_interval_s IS NULL OR repeat_interval_s BETWEEN 300 AND 604800);
ALTER TABLE alert_states ADD COLUMN notified_at timestamptz;
