//! JSON logs shaped like upstream Karpenter's (zap's production encoder): one object per
//! line with `level` (`INFO`), `time` (RFC 3339), `logger`, `message`, then the event's own
//! fields, and `controller` naming the actor module that logged — so log pipelines and
//! queries written for upstream keep working.

use std::fmt;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::settings::LogLevel;

/// Installs the JSON logger at `level` as the global subscriber (a second call is a no-op).
pub fn init(level: LogLevel) {
    let filter = tracing_subscriber::EnvFilter::new(format!(
        "{},kube=warn,hyper=warn,tower=warn,aws_smithy_runtime=warn,aws_smithy_runtime_api=warn,\
         aws_config=warn,aws_sdk_ec2=warn,aws_sdk_ssm=warn,aws_sdk_iam=warn,aws_sdk_sts=warn,\
         aws_sdk_pricing=warn",
        level.directive()
    ));
    let _already_installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .event_format(UpstreamJson)
        .with_writer(std::io::stdout)
        .try_init();
}

/// The event formatter.
pub struct UpstreamJson;

impl<S, N> FormatEvent<S, N> for UpstreamJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let line = render(event);
        writeln!(writer, "{line}")
    }
}

fn render(event: &Event<'_>) -> String {
    let meta = event.metadata();
    let mut fields = Fields(Map::new());
    event.record(&mut fields);
    let mut out = Map::new();
    out.insert("level".into(), meta.level().as_str().into());
    out.insert("time".into(), Timestamp::now().to_string().into());
    out.insert("logger".into(), "controller".into());
    let message = fields
        .0
        .remove("message")
        .unwrap_or(Value::String(String::new()));
    out.insert("message".into(), message);
    if let Some(controller) = controller_of(meta.target()) {
        out.insert("controller".into(), controller.into());
    }
    out.extend(fields.0);
    Value::Object(out).to_string()
}

/// `kerf_actors::batcher` → `batcher`; other crates' targets are left out.
fn controller_of(target: &str) -> Option<&str> {
    target
        .strip_prefix("kerf_actors::")
        .map(|rest| rest.split("::").next().unwrap_or(rest))
}

struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_carry_upstream_keys_and_fields() {
        let capture = Capture::default();
        let sink = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .event_format(UpstreamJson)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "kerf_actors::batcher::window", pods = 3, "batch closed");
        });
        let text =
            String::from_utf8(capture.0.lock().expect("not poisoned").clone()).expect("utf-8");
        let line: Value = serde_json::from_str(text.trim()).expect("one JSON object");
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["logger"], "controller");
        assert_eq!(line["message"], "batch closed");
        assert_eq!(line["controller"], "batcher");
        assert_eq!(line["pods"], 3);
        let time = line["time"].as_str().expect("time is a string");
        assert!(time.parse::<Timestamp>().is_ok(), "{time}");
    }
}
