DROP TABLE provided_repositories;
DROP TABLE integrations;
