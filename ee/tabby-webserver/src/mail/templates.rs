//! The text of each mail the server sends. Plain text only; links are built from the network
//! setting's external URL, never from a request's `Host` header (which a caller controls).

/// The kinds stored in `email_outbox.kind`.
pub const INVITATION: &str = "invitation";
pub const ACCOUNT_EXISTS: &str = "account_exists";
pub const PASSWORD_RESET: &str = "password_reset";
pub const TEST: &str = "test";
pub const JOB_FAILED: &str = "job_failed";

pub struct Text {
    pub subject: String,
    pub body: String,
}

fn base(external_url: &str) -> &str {
    external_url.trim_end_matches('/')
}

pub fn invitation(external_url: &str, code: &str, expiry_days: u32) -> Text {
    let link = format!("{}/auth/signup?invitationCode={code}", base(external_url));
    Text {
        subject: "You are invited to Tabby".into(),
        body: format!(
            "You have been invited to the Tabby server at {}.\n\n\
             Create your account here (the link works for {expiry_days} days):\n\n{link}\n\n\
             If you did not expect this invitation, ignore this mail.\n",
            base(external_url)
        ),
    }
}

pub fn account_exists(external_url: &str) -> Text {
    Text {
        subject: "Your Tabby account".into(),
        body: format!(
            "Someone asked to sign up to the Tabby server at {0} with this address, which \
             already has an account.\n\nSign in at {0}/auth/signin; if you forgot the \
             password, choose \"Forgot password?\" there.\n\n\
             If it was not you, ignore this mail.\n",
            base(external_url)
        ),
    }
}

pub fn password_reset(external_url: &str, code: &str, lifetime_hours: u32) -> Text {
    let link = format!("{}/auth/reset-password?code={code}", base(external_url));
    let hours = if lifetime_hours == 1 {
        "an hour".to_string()
    } else {
        format!("{lifetime_hours} hours")
    };
    Text {
        subject: "Reset your Tabby password".into(),
        body: format!(
            "Someone asked to reset the password of your account on the Tabby server at {}.\n\n\
             Choose a new password here (the link works once, for {hours}):\n\n{link}\n\n\
             If it was not you, ignore this mail: your password stays as it is.\n",
            base(external_url)
        ),
    }
}

pub fn test() -> Text {
    Text {
        subject: "Tabby test mail".into(),
        body: "This is a test mail from your Tabby server: its mail settings work.\n".into(),
    }
}

pub fn job_failed(external_url: &str, job: &str, run_id: &str, message: &str) -> Text {
    Text {
        subject: format!("Tabby job {job} failed"),
        body: format!(
            "The background job {job} (run {run_id}) failed on the Tabby server at {0}:\n\n\
             {message}\n\nIts log: {0}/background-jobs/{run_id}/logs (signed in as an admin).\n",
            base(external_url)
        ),
    }
}
