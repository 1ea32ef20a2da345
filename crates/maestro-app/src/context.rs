//! What every run of a process shares: the store, the event writer, the model clients, the
//! configuration, the lease keeper, the tools of runs without MCP servers, the pieces found by
//! name, and the live channels of the runs in flight. A leaf module: the run path, the worker
//! and the children of a local run all read it, and it imports none of them.

use std::sync::{Arc, Mutex, Weak};

use maestro_config::Config;
use maestro_llm::ModelClient;
use maestro_llm::flight::{Flight, Turn};
use maestro_piece::LoadOptions;
use maestro_protocol::EventRecord;
use maestro_store::{Job, JobId, Store};
use maestro_tools::Registry;

use crate::clients::ModelClients;
use crate::knowledge::Knowledge;
use crate::lease::LeaseKeeper;
use crate::live::LiveRuns;
use crate::pieces::PieceCache;
use crate::runtime_config::{ConfigWatch, ETag};
use crate::store_log::EventWriter;
use crate::toolbox::{McpSelection, Toolbox, ToolboxError, load_options};

/// Runs the children of a local run in this process (a worker leaves them to the queue).
pub(crate) trait ChildRunner: Send + Sync {
    /// Runs the child job `id` here unless this process already does.
    fn run(&self, id: JobId);
    /// Says once that `child` waits for an answer, and how to give it.
    fn tell_waiting(&self, child: &Job);
}

/// The shared tools, and the tag of the configuration they were built from.
pub(crate) type SharedTools = (Option<ETag>, Registry);

/// The tools shared by a process's runs, and the lock that whoever builds them holds.
#[derive(Debug, Default)]
pub(crate) struct SharedToolsSlot {
    /// The last tools built, read without waiting: a thousand runs starting at once each copy
    /// them in turn here, not in a queue of wake-ups.
    kept: Mutex<Option<SharedTools>>,
    /// Held while they are built; the runs that find them being built wait for them together.
    building: Flight<()>,
}

impl SharedToolsSlot {
    /// The kept tools, when they were built from the configuration tagged `tag`.
    fn kept(&self, tag: Option<&ETag>) -> Option<Registry> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        match kept.as_ref() {
            Some((built_for, registry)) if built_for.as_ref() == tag => Some(registry.clone()),
            _ => None,
        }
    }
}

/// A knowledge base made for runs: the tag of the configuration it was made from, the client
/// it embeds with (none when the configuration names no embedding model), and the base.
pub(crate) type KeptKnowledge = (Option<ETag>, Option<Arc<ModelClient>>, Arc<Knowledge>);

/// What running a job needs from the process that runs it.
pub(crate) struct JobContext {
    pub store: Store,
    /// Commits the events of all of the process's runs.
    pub events: EventWriter,
    /// The model clients and endpoint model lists the runs share.
    pub models: Arc<ModelClients>,
    /// The configuration with the command's flags applied, shared by its runs (a run whose
    /// piece names its own model gets a copy): the base a [`ConfigWatch`] lays the store's
    /// overlay over, when the process has one.
    pub config: Arc<Config>,
    /// A worker's watch on the store's configuration overlay: each job runs with the
    /// configuration current when it starts. `None`: the file configuration alone.
    pub watch: Option<ConfigWatch>,
    /// How its runs load pieces (the tool catalogue of the configuration among it), made once
    /// per configuration.
    pub load_options: Mutex<Option<(Option<ETag>, Arc<LoadOptions>)>>,
    /// The knowledge base its runs' knowledge tools use, made once per configuration.
    pub knowledge: Mutex<Option<KeptKnowledge>>,
    /// Keeps the leases of the runs, and says how long a claim holds.
    pub leases: LeaseKeeper,
    /// The model was chosen on the command line: it wins over a piece's `model`.
    pub model_from_flag: bool,
    /// Set for a local run and its children: the subtasks they spawn run in this process too.
    pub children: Option<Weak<dyn ChildRunner>>,
    /// The tools of runs whose piece uses no MCP server, built once for all of them (again
    /// when the configuration changes: the tag of the configuration they were built from).
    pub tools: Arc<SharedToolsSlot>,
    /// The pieces its runs found by name, kept for a moment.
    pub pieces: Arc<PieceCache>,
    /// The live channels of the runs in flight, by job.
    pub live: LiveRuns,
    /// Sees every committed event of the process's runs (a server's metrics).
    pub observer: Option<Arc<dyn RunObserver>>,
}

/// Whether two optional clients are the same one (clients are shared by endpoint, so the same
/// endpoint settings give the same client).
fn same_client(a: Option<&Arc<ModelClient>>, b: Option<&Arc<ModelClient>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Sees every committed event of the runs of a worker, as they are committed: a server counts
/// them into its metrics.
pub trait RunObserver: Send + Sync + std::fmt::Debug {
    /// One committed event of `job`'s run.
    fn event(&self, job: JobId, record: &EventRecord);
}

/// A run's events handed to an observer.
#[derive(Debug)]
pub(crate) struct ObserverSink {
    pub(crate) job: JobId,
    pub(crate) observer: Arc<dyn RunObserver>,
}

impl maestro_engine::EventSink for ObserverSink {
    fn record(&self, record: &EventRecord) -> std::io::Result<()> {
        self.observer.event(self.job, record);
        Ok(())
    }
}

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("store", &self.store.url())
            .field("model_from_flag", &self.model_from_flag)
            .finish_non_exhaustive()
    }
}

impl JobContext {
    /// A context for the runs of one process.
    pub(crate) fn new(
        store: Store,
        config: Arc<Config>,
        leases: LeaseKeeper,
        model_from_flag: bool,
    ) -> JobContext {
        JobContext {
            events: EventWriter::new(store.clone()),
            store,
            models: Arc::default(),
            config,
            watch: None,
            load_options: Mutex::default(),
            knowledge: Mutex::default(),
            leases,
            model_from_flag,
            children: None,
            tools: Arc::default(),
            pieces: Arc::default(),
            live: LiveRuns::default(),
            observer: None,
        }
    }

    /// The same process's context for the children of a local run: it shares the store, the
    /// writer, the models, the leases, the tools and the live channels.
    pub(crate) fn for_children(&self, children: Weak<dyn ChildRunner>) -> JobContext {
        JobContext {
            store: self.store.clone(),
            events: self.events.clone(),
            models: Arc::clone(&self.models),
            config: Arc::clone(&self.config),
            watch: self.watch.clone(),
            load_options: Mutex::default(),
            knowledge: Mutex::default(),
            leases: self.leases.clone(),
            model_from_flag: self.model_from_flag,
            children: Some(children),
            tools: Arc::clone(&self.tools),
            pieces: Arc::clone(&self.pieces),
            live: self.live.clone(),
            observer: self.observer.clone(),
        }
    }

    /// The configuration a job starting now runs with, and its tag when it comes from a
    /// [`ConfigWatch`]: the file configuration with the store's newest overlay (a model given
    /// on the command line still wins), or the file configuration alone.
    pub(crate) async fn current_config(&self) -> (Arc<Config>, Option<ETag>) {
        let Some(watch) = &self.watch else {
            return (Arc::clone(&self.config), None);
        };
        let (mut config, tag) = watch.current_tagged().await;
        if self.model_from_flag && config.llm.model != self.config.llm.model {
            Arc::make_mut(&mut config).llm.model = self.config.llm.model.clone();
        }
        (config, Some(tag))
    }

    /// How pieces load under `config` (tagged `tag`, see [`JobContext::current_config`]),
    /// made once per configuration.
    pub(crate) fn load_options(&self, config: &Config, tag: Option<&ETag>) -> Arc<LoadOptions> {
        let mut kept = self.load_options.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((for_tag, opts)) = kept.as_ref()
            && for_tag.as_ref() == tag
        {
            return Arc::clone(opts);
        }
        let opts = Arc::new(load_options(config));
        *kept = Some((tag.cloned(), Arc::clone(&opts)));
        opts
    }

    /// The knowledge base of `config` (tagged `tag`) embedding with `embedder`, made by the
    /// first run that needs it and shared by the runs after it (its readers, web client and
    /// settings are the configuration's; a run binds its job's owner to it).
    pub(crate) fn knowledge(
        &self,
        config: &Config,
        tag: Option<&ETag>,
        embedder: Option<Arc<ModelClient>>,
    ) -> Arc<Knowledge> {
        let mut kept = self.knowledge.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((for_tag, client, knowledge)) = kept.as_ref()
            && for_tag.as_ref() == tag
            && same_client(client.as_ref(), embedder.as_ref())
        {
            return Arc::clone(knowledge);
        }
        let knowledge = Arc::new(Knowledge::with_client(
            self.store.clone(),
            config,
            embedder.clone(),
        ));
        *kept = Some((tag.cloned(), embedder, Arc::clone(&knowledge)));
        knowledge
    }

    /// The built-in, web and SSH tools of the configuration, built by the first run that
    /// needs them, and again by the first after the configuration changed (`tag`).
    pub(crate) async fn shared_tools(
        &self,
        config: &Config,
        tag: Option<&ETag>,
    ) -> Result<Registry, ToolboxError> {
        let slot = &self.tools;
        let _building = match slot.building.lead_unless(|_| slot.kept(tag)).await {
            Turn::Done(registry) => return Ok(registry),
            Turn::Lead(building) => building,
        };
        let mut toolbox = Toolbox::build(config, &McpSelection::none()).await?;
        toolbox.write_pieces_to(self.piece_writer(config));
        let registry = toolbox.registry.clone();
        toolbox.shutdown().await;
        *slot.kept.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((tag.cloned(), registry.clone()));
        Ok(registry)
    }

    /// Where the runs' `CreatePiece` and `UpdatePiece` write: the store, through the one
    /// write path of [`crate::put_piece`].
    pub(crate) fn piece_writer(
        &self,
        config: &Config,
    ) -> Arc<dyn maestro_tools::pieces::PieceWriter> {
        Arc::new(crate::piece_store::StorePieceWriter {
            store: self.store.clone(),
            config: Arc::new(config.clone()),
        })
    }

    /// The runner of this process's local children, while it lives.
    pub(crate) fn children(&self) -> Option<Arc<dyn ChildRunner>> {
        self.children.as_ref().and_then(Weak::upgrade)
    }
}
