DROP TABLE user_completions;
DROP TABLE user_events;
