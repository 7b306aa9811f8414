//! The schema step of create and update: a custom resource's OpenAPI schema (defaults,
//! pruning or refusing unknown fields per `fieldValidation`, value checks, and the CEL rules
//! kerf implements for the Karpenter CRDs, transition rules against the stored object), or a built-in
//! kind decoded strictly when the client asks for it, with errors shaped as the API server
//! shapes them (400 strict decoding, 422 Invalid with causes).

use serde_json::{Value, json};

use super::{Registry, Target, WriteOptions};
use crate::apiserver::error::{ApiError, ApiResult, Reason};
use crate::apiserver::meta::meta_str;
use crate::apiserver::resources::ResourceType;
use crate::apiserver::schema::{FieldProblem, FieldValidation};
use crate::apiserver::strict;
use kerf::validation::schema::SCHEMAS;

impl Registry {
    fn field_validation(&self, opts: &WriteOptions) -> FieldValidation {
        opts.field_validation
            .unwrap_or(self.config.field_validation)
    }

    /// A custom resource's schema (defaults, unknown fields, value checks), or a built-in
    /// kind decoded strictly when the client asked for it ([`strict`]). The server's own
    /// default for a built-in is not applied: the controller and the simulated cluster
    /// write without asking, and their writes are the emulator's hot path.
    pub(super) fn validate(
        &self,
        t: &Target,
        body: &mut Value,
        old: Option<&Value>,
        opts: &WriteOptions,
    ) -> ApiResult<Vec<String>> {
        let Some(schema) = t.rt.schemas.get(&t.version) else {
            return validate_builtin(t, body, opts.field_validation);
        };
        let pass = schema
            .apply(body, self.field_validation(opts))
            .map_err(|problems| schema_error(&t.rt, meta_str(body, "name"), &problems))?;
        let broken = SCHEMAS.rule_violations(schema.root(), body, old);
        if !broken.is_empty() {
            let problems: Vec<FieldProblem> = broken
                .into_iter()
                .map(|p| {
                    FieldProblem::Invalid(
                        p.path,
                        format!("Invalid value: \"object\": {}", p.message),
                    )
                })
                .collect();
            return Err(schema_error(&t.rt, meta_str(body, "name"), &problems));
        }
        Ok(pass
            .pruned
            .into_iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect())
    }
}

/// Strict decoding of a built-in kind: refused under `Strict`, a warning per unknown field
/// under `Warn`, as the API server does.
fn validate_builtin(
    t: &Target,
    body: &Value,
    validation: Option<FieldValidation>,
) -> ApiResult<Vec<String>> {
    let Some(validation @ (FieldValidation::Strict | FieldValidation::Warn)) = validation else {
        return Ok(Vec::new());
    };
    let unknown = strict::unknown_fields(&t.rt.group, &t.rt.kind, body);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    if validation == FieldValidation::Warn {
        return Ok(unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect());
    }
    let problems: Vec<FieldProblem> = unknown.into_iter().map(FieldProblem::Unknown).collect();
    Err(schema_error(&t.rt, meta_str(body, "name"), &problems))
}

fn schema_error(rt: &ResourceType, name: &str, problems: &[FieldProblem]) -> ApiError {
    let unknown: Vec<&str> = problems
        .iter()
        .filter_map(|p| {
            if let FieldProblem::Unknown(f) = p {
                Some(f.as_str())
            } else {
                None
            }
        })
        .collect();
    if !unknown.is_empty() {
        let list: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        return ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            rt.kind, rt.storage_version(), rt.kind, list.join(", ")
        ))
        .with_details(json!({"causes": unknown.iter().map(|f| json!({"reason": "FieldValueInvalid", "message": format!("unknown field \"{f}\""), "field": f})).collect::<Vec<_>>()}));
    }
    let causes: Vec<Value> = problems
        .iter()
        .filter_map(|p| {
            if let FieldProblem::Invalid(f, m) = p {
                Some(json!({"reason": "FieldValueInvalid", "message": m, "field": f}))
            } else {
                None
            }
        })
        .collect();
    let summary: Vec<String> = problems
        .iter()
        .filter_map(|p| {
            if let FieldProblem::Invalid(f, m) = p {
                Some(format!("{f}: {m}"))
            } else {
                None
            }
        })
        .collect();
    ApiError::new(
        Reason::Invalid,
        format!(
            "{}.{} \"{name}\" is invalid: {}",
            rt.kind,
            rt.group,
            summary.join(", ")
        ),
    )
    .with_details(json!({"name": name, "group": rt.group, "kind": rt.kind, "causes": causes}))
}
