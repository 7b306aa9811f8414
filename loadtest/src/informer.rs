//! A minimal informer for the simulated actors: a kube-rs reflector (watch + local cache)
//! driven on its own task, plus a generation counter that moves on every event a caller
//! cares about, so actors wake up on change instead of polling the API server.
//!
//! The cache drops each object's `metadata.managedFields` as it arrives: no simulated actor
//! reads them, and they are a good part of every object (a pod's field owners for each of its
//! writers), held once per informer. An actor that reads only some fields of a kind it keeps
//! many of (pods) caches a projection of its own ([`Informer::start_projected`]): a typed
//! object's empty fields still take their room, so a small struct of what is read holds far
//! less than even a trimmed pod.

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Lookup, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::hash::Hash;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A cache of one resource kind kept current by a watch.
pub struct Informer<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    generation: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// Starts watching `api`. `relevant` decides which events move the generation counter.
    pub fn start(api: Api<K>, relevant: fn(&Event<K>) -> bool) -> Informer<K> {
        let objects = watcher::watcher(api, watcher::Config::default()).modify(|object: &mut K| {
            object.meta_mut().managed_fields = None;
        });
        Self::cache(objects, relevant)
    }
}

impl<P> Informer<P>
where
    P: Lookup + Clone + Send + Sync + 'static,
    P::DynamicType: Eq + Hash + Clone + Default + Send + Sync,
{
    /// Starts watching `api`, caching `project` of each object instead of the object;
    /// `relevant` sees the projection.
    pub fn start_projected<K, F>(
        api: Api<K>,
        relevant: fn(&Event<P>) -> bool,
        mut project: F,
    ) -> Informer<P>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
        F: FnMut(K) -> P + Send + 'static,
    {
        let objects = watcher::watcher(api, watcher::Config::default())
            .map(move |event| event.map(|event| projected(event, &mut project)));
        Self::cache(objects, relevant)
    }

    /// Caches what `objects` sends, moving the generation counter on `relevant` events.
    fn cache<S>(objects: S, relevant: fn(&Event<P>) -> bool) -> Informer<P>
    where
        S: futures::Stream<Item = watcher::Result<Event<P>>> + Send + 'static,
    {
        let (store, writer) = reflector::store();
        let (bump, generation) = watch::channel(0u64);
        let stream = reflector::reflector(writer, objects).default_backoff();
        // The cache is the starter's: its task allocates as the caller does.
        let task = tokio::spawn(kerf_heap::inherit(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => {
                        if relevant(&event) {
                            bump.send_modify(|g| *g += 1);
                        }
                    }
                    Err(error) => tracing::debug!(%error, "watch error; the watcher retries"),
                }
            }
        }));
        Informer {
            store,
            generation,
            task,
        }
    }
}

impl<K> Informer<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// Waits for the initial list to be cached.
    pub async fn ready(&self) {
        // The writer lives as long as the task; if it is gone there is nothing to wait for.
        let _ = self.store.wait_until_ready().await;
    }

    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// A receiver that sees the generation counter move on relevant events.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.generation.clone()
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }
}

impl<K> Drop for Informer<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `event` with `project` of each object it carries.
fn projected<K, P>(event: Event<K>, project: &mut impl FnMut(K) -> P) -> Event<P> {
    match event {
        Event::Apply(object) => Event::Apply(project(object)),
        Event::Delete(object) => Event::Delete(project(object)),
        Event::Init => Event::Init,
        Event::InitApply(object) => Event::InitApply(project(object)),
        Event::InitDone => Event::InitDone,
    }
}

/// Every event counts.
pub fn any_event<K>(_: &Event<K>) -> bool {
    true
}

/// `Lookup` for a projection of pods (a cache keyed as the pods are) with `name`, `namespace`
/// and `uid` strings and an optional `resource_version`: the kind is the API's `Pod`.
macro_rules! pod_projection_lookup {
    ($projection:ty) => {
        impl kube::runtime::reflector::Lookup for $projection {
            type DynamicType = ();

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                <k8s_openapi::api::core::v1::Pod as kube::Resource>::kind(&())
            }

            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                <k8s_openapi::api::core::v1::Pod as kube::Resource>::group(&())
            }

            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                <k8s_openapi::api::core::v1::Pod as kube::Resource>::version(&())
            }

            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                <k8s_openapi::api::core::v1::Pod as kube::Resource>::plural(&())
            }

            fn name(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(std::borrow::Cow::Borrowed(&self.name))
            }

            fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(std::borrow::Cow::Borrowed(&self.namespace))
            }

            fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
                self.resource_version
                    .as_deref()
                    .map(std::borrow::Cow::Borrowed)
            }

            fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(std::borrow::Cow::Borrowed(&self.uid))
            }
        }
    };
}
pub(crate) use pod_projection_lookup;
