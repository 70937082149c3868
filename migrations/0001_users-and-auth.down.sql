DROP TABLE password_reset;
DROP TABLE refresh_tokens;
DROP TABLE invitations;
DROP TABLE users;
DROP TABLE registration_token;
