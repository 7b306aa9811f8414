//! The HTTP face of the emulator (hyper 1, HTTP/1.1, JSON): URL routing onto the registry
//! (`/api/v1/...`, `/apis/<group>/<version>/...`, namespaced and cluster-scoped paths,
//! subresources), query parameters, content types for PATCH, chunked watch streams, Status
//! bodies for errors, `Warning` and `Retry-After` headers, and fault injection.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use super::discovery;
use super::error::{ApiError, ApiResult, Reason, success_status};
use super::faults::{self, CLIENT_HEADER, FaultState};
use super::openapi;
use super::rbac::Attributes;
use super::registry::{
    DeleteOptions, Deleted, ListQuery, PatchKind, Registry, Sub, Target, WriteOptions,
    parse_propagation,
};
use super::resources::Behavior;
use super::schema::FieldValidation;
use super::selectors::{FieldSelector, LabelSelector, selectable_fields};
use super::stopped;
use super::store::StoredObject;
use super::table;
use super::watch::{self as watches, WatchParams};

const MAX_BODY: usize = 8 << 20;

/// Response body: a whole buffer or a stream of chunks (watches).
pub enum ApiBody {
    /// A complete body.
    Full(Option<Bytes>),
    /// Chunks until the sender is dropped.
    Stream(mpsc::Receiver<Bytes>),
}

impl hyper::body::Body for ApiBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ApiBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ApiBody::Stream(rx) => rx
                .poll_recv(cx)
                .map(|chunk| chunk.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ApiBody::Full(None))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            ApiBody::Full(Some(b)) => hyper::body::SizeHint::with_exact(b.len() as u64),
            ApiBody::Full(None) => hyper::body::SizeHint::with_exact(0),
            ApiBody::Stream(_) => hyper::body::SizeHint::default(),
        }
    }
}

/// Everything a request handler needs.
pub struct App {
    /// The API.
    pub registry: Arc<Registry>,
    /// Fault injection.
    pub faults: Arc<FaultState>,
    /// `host:port` clients reach us at.
    pub address: String,
    /// Interval of watch bookmarks.
    pub bookmark_every: Duration,
    /// Flips to true on shutdown (ends watches).
    pub shutdown: watch::Receiver<bool>,
    /// Every request received, counted before routing (as the real server's
    /// `apiserver_request_total`, failed and fault-injected ones included).
    pub requests: super::RequestCount,
    /// What `/version` answers.
    pub version: super::discovery::ServedVersion,
    /// Authentication and RBAC.
    pub access: Arc<super::rbac::Access>,
}

/// Accepts connections until `shutdown` flips.
pub async fn serve(listener: TcpListener, app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _peer)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let app = app.clone();
                let mut stop = shutdown.clone();
                tokio::spawn(kerf_heap::inherit(async move {
                    let service = hyper::service::service_fn(move |req| handle(app.clone(), req));
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    tokio::pin!(conn);
                    tokio::select! {
                        _ = conn.as_mut() => {}
                        _ = stopped(&mut stop) => {
                            conn.as_mut().graceful_shutdown();
                            let _ = conn.await;
                        }
                    }
                }));
            }
            _ = stopped(&mut shutdown) => return,
        }
    }
}

fn json_response(code: u16, body: Bytes) -> Response<ApiBody> {
    let mut response = Response::new(ApiBody::Full(Some(body)));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn value_response(code: u16, value: &Value) -> Response<ApiBody> {
    json_response(
        code,
        Bytes::from(serde_json::to_vec(value).expect("a serde_json::Value always serialises")),
    )
}

fn error_response(err: &ApiError) -> Response<ApiBody> {
    let mut response = value_response(err.code(), &err.to_status());
    if let Some(secs) = err.retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

async fn handle(app: Arc<App>, req: Request<Incoming>) -> Result<Response<ApiBody>, Infallible> {
    app.requests.add_one();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let result = route(&app, req).await;
    let response = result.unwrap_or_else(|err| error_response(&err));
    tracing::debug!(%method, path, status = response.status().as_u16(), "api request");
    Ok(response)
}

/// Decodes `application/x-www-form-urlencoded` query strings.
fn parse_query(query: &str) -> HashMap<String, String> {
    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    match std::str::from_utf8(&bytes[i + 1..i + 3])
                        .ok()
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                    {
                        Some(b) => {
                            out.push(b);
                            i += 2;
                        }
                        None => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(pair), String::new()),
        })
        .collect()
}

/// A parsed resource URL.
struct ResourcePath {
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_resource_path(segments: &[&str]) -> Option<ResourcePath> {
    let (group, version, rest) = match segments {
        ["api", version, rest @ ..] => (String::new(), version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (group.to_string(), version.to_string(), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !matches!(tail, [] | ["status" | "finalize"]) => {
            (Some(ns.to_string()), tail)
        }
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (plural, None, None),
        [plural, name] => (plural, Some(name.to_string()), None),
        [plural, name, sub] => (plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return None,
    };
    Some(ResourcePath {
        group,
        version,
        namespace,
        plural: plural.to_string(),
        name,
        subresource,
    })
}

async fn route(app: &App, req: Request<Incoming>) -> ApiResult<Response<ApiBody>> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let types = || -> Vec<_> {
        app.registry
            .store
            .all()
            .iter()
            .map(|ts| ts.resource_type())
            .collect()
    };
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let user = app.access.authenticate(authorization)?;
    let get = req.method() == Method::GET;
    match segments.as_slice() {
        ["version"] if get => return Ok(value_response(200, &app.version.document())),
        ["healthz" | "readyz" | "livez"] if get => {
            return Ok(json_response(200, Bytes::from_static(b"ok")));
        }
        ["api"] if get => return Ok(value_response(200, &discovery::core_versions(&app.address))),
        ["apis"] if get => return Ok(value_response(200, &discovery::group_list(&types()))),
        ["api", version] if get => {
            return discovery::resource_list(&types(), "", version)
                .map(|v| value_response(200, &v))
                .ok_or_else(not_found);
        }
        ["apis", group] if get => {
            return discovery::group(&types(), group)
                .map(|v| value_response(200, &v))
                .ok_or_else(not_found);
        }
        ["apis", group, version] if get => {
            return discovery::resource_list(&types(), group, version)
                .map(|v| value_response(200, &v))
                .ok_or_else(not_found);
        }
        ["openapi", "v3"] if get => return Ok(value_response(200, &openapi::index(&types()))),
        ["openapi", "v3", rest @ ..] if get => {
            return openapi::document(&types(), &rest.join("/"))
                .map(|v| value_response(200, &v))
                .ok_or_else(not_found);
        }
        _ => {}
    }
    let resource = parse_resource_path(&segments).ok_or_else(not_found)?;
    if let Some(user) = &user {
        let watch = is_true(parse_query(req.uri().query().unwrap_or_default()).get("watch"));
        let attrs = rbac_attributes(req.method(), &resource, watch);
        app.access.authorize(&app.registry, user, &attrs)?;
    }
    let client = req
        .headers()
        .get(CLIENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(client) = &client {
        // A partitioned client's request never reaches the store, as if lost on the way.
        if app.faults.is_partitioned(client) {
            return std::future::pending().await;
        }
        if resource.plural == "leases"
            && let Some(delay) = app.faults.lease_delay(client)
        {
            tokio::time::sleep(delay).await;
        }
        if req.method() != Method::GET {
            app.faults.record_mutation(client, req.method(), &path);
        }
    }
    let (latency, injected) = app.faults.roll();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some(err) = injected {
        return Err(err);
    }
    if let Some(err) = app.faults.targeted(&faults::Target {
        method: req.method().as_str().to_owned(),
        plural: resource.plural.clone(),
        subresource: resource.subresource.clone(),
    }) {
        return Err(err);
    }
    let query = parse_query(req.uri().query().unwrap_or_default());
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let method = req.method().clone();
    let body = read_body(req).await?;
    let target = app.registry.target(
        &resource.group,
        &resource.version,
        &resource.plural,
        resource.namespace.as_deref(),
    )?;
    let request = ResourceRequest {
        app,
        target,
        query,
        accept,
        content_type,
        user_agent,
        body,
    };
    match (
        &method,
        resource.name.as_deref(),
        resource.subresource.as_deref(),
    ) {
        (&Method::GET, None, None) if is_true(request.query.get("watch")) => request.watch(),
        (&Method::GET, None, None) => request.list(),
        (&Method::POST, None, None) => request.create(),
        (&Method::DELETE, None, None) => request.delete_collection(),
        (&Method::GET, Some(name), None | Some("status")) => {
            if resource.subresource.is_some() {
                request.require_status()?;
            }
            request.get(name)
        }
        (&Method::PUT, Some(name), sub @ (None | Some("status"))) => {
            request.replace(name, request.sub(sub)?)
        }
        (&Method::PATCH, Some(name), sub @ (None | Some("status"))) => {
            request.patch(name, request.sub(sub)?)
        }
        (&Method::DELETE, Some(name), None) => request.delete(name),
        (&Method::POST, Some(name), Some("binding")) if request.target.rt.subresources.binding => {
            request.bind(name)
        }
        (&Method::POST, Some(name), Some("eviction"))
            if request.target.rt.subresources.eviction =>
        {
            request.evict(name)
        }
        (&Method::GET | &Method::PUT | &Method::PATCH, Some(name), Some("scale"))
            if request.target.rt.subresources.scale =>
        {
            request.scale(&method, name)
        }
        (_, _, Some(_)) => Err(not_found()),
        _ => Err(ApiError::new(
            Reason::MethodNotAllowed,
            format!("the server does not allow this method on the requested resource ({method})"),
        )),
    }
}

/// The request as RBAC sees it: the verb its method and path make, and what it touches.
fn rbac_attributes(method: &Method, resource: &ResourcePath, watch: bool) -> Attributes {
    let named = resource.name.is_some();
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    };
    let plural = match &resource.subresource {
        Some(sub) => format!("{}/{sub}", resource.plural),
        None => resource.plural.clone(),
    };
    Attributes {
        verb: verb.to_owned(),
        group: resource.group.clone(),
        resource: plural,
        namespace: resource.namespace.clone(),
        name: resource.name.clone(),
    }
}

fn not_found() -> ApiError {
    ApiError::new(
        Reason::NotFound,
        "the server could not find the requested resource",
    )
}

fn is_true(value: Option<&String>) -> bool {
    value.is_some_and(|v| v == "true" || v == "1")
}

async fn read_body(req: Request<Incoming>) -> ApiResult<Bytes> {
    let limited = http_body_util::Limited::new(req.into_body(), MAX_BODY);
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) => Err(ApiError::new(
            Reason::BadRequest,
            format!("reading request body: {err}"),
        )),
    }
}

struct ResourceRequest<'a> {
    app: &'a App,
    target: Target,
    query: HashMap<String, String>,
    accept: String,
    content_type: String,
    user_agent: Option<String>,
    body: Bytes,
}

impl ResourceRequest<'_> {
    fn registry(&self) -> &Arc<Registry> {
        &self.app.registry
    }

    fn require_status(&self) -> ApiResult<()> {
        if self.target.rt.subresources.status {
            Ok(())
        } else {
            Err(not_found())
        }
    }

    fn sub(&self, sub: Option<&str>) -> ApiResult<Sub> {
        match sub {
            Some("status") => self.require_status().map(|()| Sub::Status),
            _ => Ok(Sub::Main),
        }
    }

    fn json_body(&self) -> ApiResult<Value> {
        if self.body.is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_slice(&self.body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request could not be decoded as JSON: {e}"
            ))
        })
    }

    fn write_options(&self) -> ApiResult<WriteOptions> {
        let field_validation = match self.query.get("fieldValidation").map(String::as_str) {
            None | Some("") => None,
            Some("Strict") => Some(FieldValidation::Strict),
            Some("Warn") => Some(FieldValidation::Warn),
            Some("Ignore") => Some(FieldValidation::Ignore),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation must be Ignore, Warn or Strict, not {other:?}"
                )));
            }
        };
        Ok(WriteOptions {
            dry_run: self.query.get("dryRun").is_some_and(|v| v == "All"),
            field_manager: self
                .query
                .get("fieldManager")
                .filter(|m| !m.is_empty())
                .cloned(),
            field_validation,
            force: is_true(self.query.get("force")),
            user_agent: self.user_agent.clone(),
        })
    }

    fn list_query(&self) -> ApiResult<ListQuery> {
        let labels = LabelSelector::parse(
            self.query
                .get("labelSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )?;
        let fields = FieldSelector::parse(
            self.query
                .get("fieldSelector")
                .map(String::as_str)
                .unwrap_or_default(),
            selectable_fields(&self.target.rt.group, &self.target.rt.plural),
        )?;
        let limit = match self.query.get("limit").map(String::as_str) {
            None | Some("") => 0,
            Some(l) => l
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        };
        Ok(ListQuery {
            labels,
            fields,
            limit,
            continue_token: self.query.get("continue").cloned(),
        })
    }

    /// What Table rows carry (`includeObject`).
    fn include_object(&self) -> table::Include {
        table::Include::parse(self.query.get("includeObject").map(String::as_str))
    }

    /// The object's JSON for the requested version.
    fn render(&self, object: &StoredObject) -> Bytes {
        let api_version = self.target.rt.api_version(&self.target.version);
        if object.attrs.api_version == api_version {
            return object.bytes.clone();
        }
        let mut value = object.value();
        value["apiVersion"] = json!(api_version);
        Bytes::from(serde_json::to_vec(&value).expect("a serde_json::Value always serialises"))
    }

    fn object_response(
        &self,
        code: u16,
        object: &StoredObject,
        warnings: &[String],
    ) -> Response<ApiBody> {
        if table::wants_table(&self.accept) {
            let value = table::table(
                &self.target.rt,
                &self.target.version,
                &[&object.value()],
                self.registry().clock.now(),
                &object.rv.to_string(),
                self.include_object(),
            );
            return value_response(code, &value);
        }
        let mut response = json_response(code, self.render(object));
        for warning in warnings {
            if let Ok(v) =
                HeaderValue::from_str(&format!("299 - \"{}\"", warning.replace('"', "'")))
            {
                response.headers_mut().append(header::WARNING, v);
            }
        }
        response
    }

    fn get(&self, name: &str) -> ApiResult<Response<ApiBody>> {
        let object = self.registry().get(&self.target, name)?;
        Ok(self.object_response(200, &object, &[]))
    }

    fn list(&self) -> ApiResult<Response<ApiBody>> {
        let page = self.registry().list(&self.target, &self.list_query()?)?;
        // A page's metadata is the same for a Table as for a list: kubectl asks for Tables
        // in chunks of 500 and follows `continue` until it is absent.
        let mut metadata = json!({"resourceVersion": page.rv.to_string()});
        if let Some(token) = &page.continue_token {
            metadata["continue"] = json!(token);
            metadata["remainingItemCount"] = json!(page.remaining);
        }
        if table::wants_table(&self.accept) {
            let values: Vec<Value> = page.items.iter().map(|o| o.value()).collect();
            let objects: Vec<&Value> = values.iter().collect();
            let mut value = table::table(
                &self.target.rt,
                &self.target.version,
                &objects,
                self.registry().clock.now(),
                &page.rv.to_string(),
                self.include_object(),
            );
            value["metadata"] = metadata;
            return Ok(value_response(200, &value));
        }
        let rt = &self.target.rt;
        let head = json!({"kind": rt.list_kind(), "apiVersion": rt.api_version(&self.target.version), "metadata": metadata});
        let head = serde_json::to_vec(&head).expect("a serde_json::Value always serialises");
        let mut out = BytesMut::with_capacity(
            head.len() + page.items.iter().map(|o| o.bytes.len() + 1).sum::<usize>() + 16,
        );
        out.extend_from_slice(&head[..head.len() - 1]);
        out.extend_from_slice(b",\"items\":[");
        for (i, object) in page.items.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b",");
            }
            out.extend_from_slice(&self.render(object));
        }
        out.extend_from_slice(b"]}");
        Ok(json_response(200, out.freeze()))
    }

    fn watch(&self) -> ApiResult<Response<ApiBody>> {
        let q = self.list_query()?;
        let timeout = match self.query.get("timeoutSeconds").map(String::as_str) {
            None | Some("") => None,
            Some(t) => Some(Duration::from_secs(t.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid timeoutSeconds {t:?}"))
            })?)),
        };
        let params = WatchParams {
            labels: q.labels,
            fields: q.fields,
            resource_version: self.query.get("resourceVersion").cloned(),
            send_initial_events: is_true(self.query.get("sendInitialEvents")),
            bookmarks: is_true(self.query.get("allowWatchBookmarks")),
            timeout,
            table: table::wants_table(&self.accept).then(|| watches::TableRows {
                include: self.include_object(),
                clock: self.registry().clock.clone(),
            }),
        };
        let watch = watches::prepare(self.target.clone(), params)?;
        let (tx, rx) = mpsc::channel(16);
        let registry = self.registry().clone();
        let stop = self.app.faults.drop_signal();
        let mut shutdown = self.app.shutdown.clone();
        let every = self.app.bookmark_every;
        tokio::spawn(kerf_heap::inherit(async move {
            tokio::select! {
                end = watch.run(&registry.store, tx, stop, every) => tracing::debug!(?end, "watch ended"),
                _ = stopped(&mut shutdown) => {}
            }
        }));
        let mut response = Response::new(ApiBody::Stream(rx));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(response)
    }

    fn create(&self) -> ApiResult<Response<ApiBody>> {
        let written =
            self.registry()
                .create(&self.target, self.json_body()?, &self.write_options()?)?;
        Ok(self.object_response(201, &written.object, &written.warnings))
    }

    fn replace(&self, name: &str, sub: Sub) -> ApiResult<Response<ApiBody>> {
        let written = self.registry().replace(
            &self.target,
            name,
            sub,
            self.json_body()?,
            &self.write_options()?,
        )?;
        Ok(self.object_response(200, &written.object, &written.warnings))
    }

    fn patch(&self, name: &str, sub: Sub) -> ApiResult<Response<ApiBody>> {
        let media = self
            .content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim();
        let kind = match media {
            "application/merge-patch+json" => PatchKind::Merge,
            "application/json-patch+json" => PatchKind::Json,
            "application/strategic-merge-patch+json" => PatchKind::Strategic,
            "application/apply-patch+yaml" => PatchKind::Apply,
            other => {
                return Err(ApiError::new(
                    Reason::UnsupportedMediaType,
                    format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {other:?})"
                    ),
                ));
            }
        };
        let patch: Value = match kind {
            PatchKind::Apply => serde_json::from_slice(&self.body).or_else(|_| {
                let text = std::str::from_utf8(&self.body)
                    .map_err(|e| ApiError::bad_request(format!("apply body is not UTF-8: {e}")))?;
                serde_saphyr::from_str::<Value>(text)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
            })?,
            _ => self.json_body()?,
        };
        let written = self.registry().patch(
            &self.target,
            name,
            sub,
            kind,
            &patch,
            &self.write_options()?,
        )?;
        Ok(self.object_response(
            if written.created { 201 } else { 200 },
            &written.object,
            &written.warnings,
        ))
    }

    fn delete_options(&self) -> ApiResult<DeleteOptions> {
        let mut opts = if self.body.is_empty() {
            DeleteOptions::default()
        } else {
            DeleteOptions::from_json(&self.json_body()?)?
        };
        if let Some(grace) = self.query.get("gracePeriodSeconds") {
            opts.grace_period_seconds = Some(grace.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid gracePeriodSeconds {grace:?}"))
            })?);
        }
        if let Some(policy) = self.query.get("propagationPolicy") {
            opts.propagation = parse_propagation(policy)?;
        }
        if self.query.get("dryRun").is_some_and(|v| v == "All") {
            opts.dry_run = true;
        }
        Ok(opts)
    }

    fn delete(&self, name: &str) -> ApiResult<Response<ApiBody>> {
        match self
            .registry()
            .delete(&self.target, name, &self.delete_options()?)?
        {
            Deleted::Pending(object) => Ok(self.object_response(200, &object, &[])),
            Deleted::Removed(object) if self.target.rt.behavior == Behavior::Pod => {
                Ok(self.object_response(200, &object, &[]))
            }
            Deleted::Removed(object) => Ok(value_response(
                200,
                &success_status(
                    200,
                    Some(json!({
                        "name": object.attrs.name, "group": self.target.rt.group, "kind": self.target.rt.plural, "uid": object.attrs.uid,
                    })),
                ),
            )),
        }
    }

    fn delete_collection(&self) -> ApiResult<Response<ApiBody>> {
        let deleted = self.registry().delete_collection(
            &self.target,
            &self.list_query()?,
            &self.delete_options()?,
        )?;
        let rt = &self.target.rt;
        let items: Vec<Value> = deleted.iter().map(|o| o.value()).collect();
        Ok(value_response(
            200,
            &json!({
                "kind": rt.list_kind(), "apiVersion": rt.api_version(&self.target.version),
                "metadata": {"resourceVersion": self.registry().store.current_rv().to_string()}, "items": items,
            }),
        ))
    }

    fn bind(&self, name: &str) -> ApiResult<Response<ApiBody>> {
        self.registry()
            .bind(&self.target, name, &self.json_body()?)?;
        Ok(value_response(201, &success_status(201, None)))
    }

    fn evict(&self, name: &str) -> ApiResult<Response<ApiBody>> {
        self.registry()
            .evict(&self.target, name, &self.json_body()?)?;
        Ok(value_response(201, &success_status(201, None)))
    }

    fn scale(&self, method: &Method, name: &str) -> ApiResult<Response<ApiBody>> {
        let object = self.registry().get(&self.target, name)?;
        let paths = &self.target.rt.scale_paths;
        let scale_of = |obj: &Value| {
            let mut status = json!({"replicas": obj.pointer(&paths.status_replicas).cloned().unwrap_or(json!(0))});
            if let Some(selector) = paths.label_selector.as_deref().and_then(|p| obj.pointer(p)) {
                status["selector"] = selector.clone();
            }
            json!({
                "kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": name, "namespace": obj.pointer("/metadata/namespace"), "uid": obj.pointer("/metadata/uid"),
                    "resourceVersion": obj.pointer("/metadata/resourceVersion"), "creationTimestamp": obj.pointer("/metadata/creationTimestamp")},
                "spec": {"replicas": obj.pointer(&paths.spec_replicas).cloned().unwrap_or(json!(0))},
                "status": status,
            })
        };
        if *method == Method::GET {
            return Ok(value_response(200, &scale_of(&object.value())));
        }
        let mut scale = scale_of(&object.value());
        let body = self.json_body()?;
        if *method == Method::PUT {
            scale = body;
        } else {
            super::patch::merge_patch(&mut scale, &body);
        }
        let replicas = scale
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .ok_or_else(|| ApiError::bad_request("spec.replicas is required"))?;
        let rv = scale
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let written = self.registry().update_with(
            &self.target,
            name,
            Sub::Main,
            &WriteOptions::default(),
            |current| {
                let mut next = current.clone();
                set_pointer(&mut next, &paths.spec_replicas, json!(replicas));
                if !rv.is_empty() {
                    next["metadata"]["resourceVersion"] = json!(rv);
                }
                Ok(next)
            },
        )?;
        Ok(value_response(200, &scale_of(&written.object.value())))
    }
}

/// Sets the value at a JSON `pointer`, creating the objects on the way.
fn set_pointer(target: &mut Value, pointer: &str, value: Value) {
    let mut node = target;
    for segment in pointer.split('/').filter(|s| !s.is_empty()) {
        if !node.is_object() {
            *node = json!({});
        }
        node = &mut node[segment];
    }
    *node = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths() {
        let p = parse_resource_path(&[
            "api",
            "v1",
            "namespaces",
            "default",
            "pods",
            "web",
            "eviction",
        ])
        .expect("valid");
        assert_eq!(
            (
                p.group.as_str(),
                p.namespace.as_deref(),
                p.plural.as_str(),
                p.name.as_deref(),
                p.subresource.as_deref()
            ),
            ("", Some("default"), "pods", Some("web"), Some("eviction"))
        );
        let p = parse_resource_path(&["api", "v1", "namespaces", "kube-system"]).expect("valid");
        assert_eq!(
            (p.plural.as_str(), p.name.as_deref(), p.namespace),
            ("namespaces", Some("kube-system"), None)
        );
        let p = parse_resource_path(&["api", "v1", "namespaces", "x", "status"]).expect("valid");
        assert_eq!(
            (p.name.as_deref(), p.subresource.as_deref()),
            (Some("x"), Some("status"))
        );
        let p = parse_resource_path(&["apis", "karpenter.sh", "v1", "nodepools"]).expect("valid");
        assert_eq!(
            (p.group.as_str(), p.plural.as_str(), p.name),
            ("karpenter.sh", "nodepools", None)
        );
        let p = parse_resource_path(&["api", "v1", "namespaces", "ns", "pods"]).expect("valid");
        assert_eq!(
            (p.namespace.as_deref(), p.plural.as_str()),
            (Some("ns"), "pods")
        );
        assert!(parse_resource_path(&["apis", "g"]).is_none());
    }

    #[test]
    fn decodes_queries() {
        let q = parse_query("labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&watch=1&x");
        assert_eq!(
            q.get("labelSelector").map(String::as_str),
            Some("app=web,tier in (a,b)")
        );
        assert_eq!(q.get("watch").map(String::as_str), Some("1"));
        assert_eq!(q.get("x").map(String::as_str), Some(""));
        assert_eq!(
            parse_query("a=%zz%4").get("a").map(String::as_str),
            Some("%zz%4")
        );
    }
}
