-- PostgreSQL twin of the SQLite migration migrations/0005_groups-and-access-policy.down.sql.
DROP TABLE source_id_read_access_policies;
DROP TABLE user_group_memberships;
DROP TABLE user_groups;
