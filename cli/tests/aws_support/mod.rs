//! AWS for `kerf controller` tests: one moto server per test binary (a real AWS API
//! emulator, started on first use) and the environment that points the controller's
//! standard AWS configuration at it.

use std::process::Command;
use std::sync::OnceLock;

use kerf_aws::moto::MotoServer;

pub const REGION: &str = "us-east-1";

/// The moto server of this test binary; a test fails, saying how to install moto, when it
/// cannot start.
pub fn moto() -> &'static MotoServer {
    static SERVER: OnceLock<MotoServer> = OnceLock::new();
    SERVER.get_or_init(|| match MotoServer::start() {
        Ok(server) => server,
        Err(e) => panic!("the controller tests need moto: {e}"),
    })
}

/// Points `cmd`'s AWS SDK at `endpoint` with static test credentials, ignoring whatever
/// AWS configuration the machine running the tests has.
pub fn aws_env(cmd: &mut Command, endpoint: &str) {
    for var in [
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_SESSION_TOKEN",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_MAX_ATTEMPTS",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", REGION)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true");
}
