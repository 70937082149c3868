DROP TABLE oauth_credential;
