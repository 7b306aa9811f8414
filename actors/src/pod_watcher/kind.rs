//! One kind's watch loop: list-then-watch through kube-runtime's watcher (which relists on
//! 410 Gone and reconnects with backoff), each object read from its untyped form into `K`
//! and written to the kind's store. An object that does not read as `K` is logged and
//! counted under `kerf_cluster_state_malformed_objects_total{kind}` and kept out of the store.

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};

use crate::metrics::MALFORMED_OBJECTS;
use crate::state::{Change, ObjectKey, StoreWriter, Stored};

fn key_of(object: &DynamicObject) -> ObjectKey {
    ObjectKey::new(
        object.metadata.namespace.as_deref(),
        object.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// Watches `K` in every namespace until the stream ends (it does not, short of the task
/// being dropped), writing into `writer` and calling `on_change` with the stored form once
/// each change is stored.
pub async fn watch_kind<K>(
    client: Client,
    writer: &mut StoreWriter<K>,
    on_change: &mut impl FnMut(&K::Form, Change),
) where
    K: Resource<DynamicType = ()> + serde::de::DeserializeOwned + Clone + std::fmt::Debug + Stored,
{
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let kind = writer.store().kind();
    let mut events = watcher(api).boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => writer.begin_relist(),
            Ok(Event::InitDone) => {
                writer.finish_relist();
                tracing::debug!(kind, objects = writer.store().len(), "store synced");
            }
            Ok(Event::Apply(object) | Event::InitApply(object)) => {
                let key = key_of(&object);
                match object.try_parse::<K>() {
                    Ok(typed) => {
                        // Stored first: a hook's receiver reads the store and must see this
                        // version, not the one it replaces.
                        writer.apply(key.clone(), typed);
                        if let Some(stored) = writer.store().get(&key) {
                            on_change(&stored, Change::Applied);
                        }
                    }
                    Err(err) => {
                        metrics::counter!(MALFORMED_OBJECTS, "kind" => kind).increment(1);
                        tracing::error!(kind, object = %key, error = %err, "ignoring malformed object");
                        writer.forget(&key);
                    }
                }
            }
            Ok(Event::Delete(object)) => {
                let key = key_of(&object);
                if let Some(old) = writer.delete(&key) {
                    on_change(&old, Change::Deleted);
                }
            }
            Err(err) => tracing::warn!(kind, error = %err, "watch failed; retrying with backoff"),
        }
    }
}

fn watcher(
    api: Api<DynamicObject>,
) -> impl futures::Stream<Item = Result<Event<DynamicObject>, watcher::Error>> {
    watcher::watcher(api, watcher::Config::default()).default_backoff()
}
