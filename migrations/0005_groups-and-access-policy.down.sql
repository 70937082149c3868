DROP TABLE source_id_read_access_policies;
DROP TABLE user_group_memberships;
DROP TABLE user_groups;
