//! What a caught panic said: the one message every supervisor of kerf's work logs and
//! counts a panic with (the controller's actors and loops, the AWS request batchers), kept
//! here so each reads a payload the same way.

use std::any::Any;

/// The message a panic carried (`panic!("...")` with or without arguments).
pub fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "(a panic without a message)".to_owned()
    }
}
