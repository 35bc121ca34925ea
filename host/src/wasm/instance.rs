//! Plugin instances: a `Store` per instance with its sandbox, limits and counters.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use sluice_guest::batch::Batch;
use sluice_guest::types::{ColumnDef, DorisType, arrow_schema, columns_of};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, Store, Trap, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use super::bindings::Transform as TransformBindings;
use super::bindings::decoder::Decoder as DecoderBindings;
use super::bindings::sluice::plugin::{host, types as wit};
use super::budget::thread_cpu_time;
use super::limits::MemoryLimiter;
use super::{CpuBudget, EPOCH_TICK, Plugin, PluginError};

/// Most of a plugin's stderr (e.g. a panic message) that is kept for error reports.
const STDERR_CAPACITY: usize = 64 * 1024;

/// What a plugin says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    pub name: String,
    pub description: String,
    /// `(name, default, description)`.
    pub config_keys: Vec<(String, Option<String>, String)>,
    pub example_input: Option<String>,
}

/// Per-store state: the deny-by-default WASI context, the memory limiter and the counters.
pub struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    plugin: String,
    counters: Arc<Mutex<BTreeMap<String, u64>>>,
    stderr: MemoryOutputPipe,
    /// The shared CPU budget and the running call's account, when the plugin has a budget.
    meter: Option<Meter>,
}

/// A call's account with a shared CPU budget: the thread's CPU clock when it was last charged and
/// its running time (pauses excluded), which the epoch callback checks every tick.
struct Meter {
    budget: Arc<CpuBudget>,
    /// The thread's CPU clock when the call was last charged.
    cpu: Duration,
    started: Instant,
    paused: Duration,
    timeout: Duration,
}

impl Meter {
    /// Charge the CPU time used since the last charge; returns how long the call must pause for
    /// the budget.
    fn charge(&mut self) -> Duration {
        let now = thread_cpu_time();
        let used = now.saturating_sub(self.cpu);
        self.cpu = now;
        self.budget.spend(used)
    }
}

/// Every epoch tick of a metered call: charge the budget, pause while it is in debt, and end the
/// call once it has run (pauses excluded) longer than its time limit.
fn on_tick(mut ctx: wasmtime::StoreContextMut<'_, StoreState>) -> wasmtime::Result<UpdateDeadline> {
    let Some(m) = ctx.data_mut().meter.as_mut() else { return Ok(UpdateDeadline::Interrupt) };
    if m.started.elapsed().saturating_sub(m.paused) >= m.timeout {
        return Ok(UpdateDeadline::Interrupt);
    }
    if !m.charge().is_zero() {
        m.paused += m.budget.pause();
        m.cpu = thread_cpu_time();
    }
    Ok(UpdateDeadline::Continue(1))
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl host::Host for StoreState {
    fn log(&mut self, level: host::Level, message: String) {
        let plugin = self.plugin.as_str();
        match level {
            host::Level::Trace => tracing::trace!(plugin, "{message}"),
            host::Level::Debug => tracing::debug!(plugin, "{message}"),
            host::Level::Info => tracing::info!(plugin, "{message}"),
            host::Level::Warn => tracing::warn!(plugin, "{message}"),
            host::Level::Error => tracing::error!(plugin, "{message}"),
        }
    }

    fn counter_add(&mut self, name: String, delta: u64) {
        if let Ok(mut counters) = self.counters.lock() {
            let c = counters.entry(name).or_default();
            *c = c.saturating_add(delta);
        }
    }
}

/// A clock that always reads zero: plugins get no clock unless the WIT grants one.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// The linker: the `host` interface, plus WASI with nothing granted (Rust's std imports WASI
/// even when a plugin does no I/O): no files, no environment, no network, frozen clocks.
pub(crate) fn linker(engine: &Engine) -> wasmtime::Result<Linker<StoreState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    host::add_to_linker::<StoreState, HasSelf<StoreState>>(&mut linker, |s| s)?;
    Ok(linker)
}

/// One store and its bookkeeping; the typed instances wrap it.
struct Instance {
    plugin: Plugin,
    store: Store<StoreState>,
    poisoned: bool,
}

impl Instance {
    fn new(plugin: &Plugin) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
        let wasi =
            WasiCtx::builder().stderr(stderr.clone()).wall_clock(FrozenClock).monotonic_clock(FrozenClock).build();
        let state = StoreState {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(plugin.limits().memory),
            plugin: plugin.name().to_string(),
            counters: Arc::default(),
            stderr,
            meter: plugin.budget().map(|b| Meter {
                budget: b.clone(),
                cpu: Duration::ZERO,
                started: Instant::now(),
                paused: Duration::ZERO,
                timeout: plugin.limits().timeout,
            }),
        };
        let mut store = Store::new(&plugin.inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        if plugin.budget().is_some() {
            store.epoch_deadline_callback(on_tick);
        }
        Self { plugin: plugin.clone(), store, poisoned: false }
    }

    /// Whether this instance's memory has grown past three quarters of its limit. Some guest
    /// runtimes (componentize-py, componentize-js) never free the buffers the host writes a
    /// call's arguments into, so their memory grows by about one input per call; such an
    /// instance is replaced by a fresh one (same config) between calls, before it hits the limit.
    /// A trapped (poisoned) instance is never renewed: it stays refused.
    fn worn(&self) -> bool {
        let limiter = &self.store.data().limiter;
        !self.poisoned && limiter.largest > limiter.limit / 4 * 3
    }

    /// The size of the instance's largest linear memory, in bytes.
    fn memory_bytes(&self) -> u64 {
        self.store.data().limiter.largest
    }

    /// Carry the counters (and the call numbering they imply) over to a fresh instance.
    fn take_counters_of(&mut self, old: &Instance) {
        self.store.data_mut().counters = old.store.data().counters.clone();
    }

    /// Run one call under the plugin's limits, turning traps into errors that name the limit.
    /// After a trap the instance is unusable (its state may be half-updated).
    fn call<R>(
        &mut self,
        call: &str,
        f: impl FnOnce(&mut Store<StoreState>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        let name = self.plugin.name().to_string();
        if self.poisoned {
            return Err(PluginError::Poisoned { plugin: name });
        }
        let limits = self.plugin.limits().clone();
        let metered = self.store.data().meter.is_some();
        // A metered call is looked at every tick (see `on_tick`); others end at their deadline.
        let ticks = limits.timeout.as_millis().div_ceil(EPOCH_TICK.as_millis()).max(1) as u64 + 1;
        self.store.set_epoch_deadline(if metered { 1 } else { ticks });
        if let Some(fuel) = limits.fuel {
            self.store
                .set_fuel(fuel)
                .map_err(|e| PluginError::Instantiate { plugin: name.clone(), detail: e.to_string() })?;
        }
        if let Some(m) = self.store.data_mut().meter.as_mut() {
            m.cpu = thread_cpu_time();
            m.started = Instant::now();
            m.paused = Duration::ZERO;
        }
        self.store.data_mut().limiter.exceeded = None;
        let outcome = f(&mut self.store);
        if let Some(m) = self.store.data_mut().meter.as_mut() {
            // What the call used since its last tick; a debt is paid before the next call.
            m.charge();
        }
        match outcome {
            Ok(r) => Ok(r),
            Err(e) => {
                self.poisoned = true;
                let call = call.to_string();
                if let Some(requested) = self.store.data().limiter.exceeded {
                    return Err(PluginError::MemoryLimit { plugin: name, call, limit: limits.memory, requested });
                }
                match e.downcast_ref::<Trap>() {
                    Some(Trap::Interrupt) => Err(PluginError::Timeout { plugin: name, call, limit: limits.timeout }),
                    Some(Trap::OutOfFuel) => {
                        Err(PluginError::OutOfFuel { plugin: name, call, limit: limits.fuel.unwrap_or(0) })
                    }
                    _ => {
                        let stderr = self.store.data().stderr.contents();
                        let said = String::from_utf8_lossy(&stderr);
                        let last = last_words(&said);
                        // The trap code is the one-line reason; the wasm backtrace goes to the debug log.
                        tracing::debug!(plugin = %name, error = ?e, "plugin trapped");
                        let reason = match e.downcast_ref::<Trap>() {
                            Some(trap) => trap.to_string(),
                            None => format!("{e}").lines().next().unwrap_or("unknown error").to_string(),
                        };
                        let detail =
                            if last.is_empty() { reason } else { format!("{reason} (plugin said: {})", last.trim()) };
                        Err(PluginError::Trap { plugin: name, call, detail })
                    }
                }
            }
        }
    }

    fn counters(&self) -> BTreeMap<String, u64> {
        self.store.data().counters.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

/// What a plugin printed before it died: the message of a Rust panic, else its last line.
fn last_words(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("note: ")).collect();
    match lines.iter().rposition(|l| l.contains("panicked at")) {
        Some(i) if i + 1 < lines.len() => lines[i + 1],
        _ => lines.last().copied().unwrap_or(""),
    }
}

fn schema_to_wit(schema: &Schema) -> Result<wit::Schema, String> {
    let columns = columns_of(schema).map_err(|e| e.message)?;
    Ok(wit::Schema {
        columns: columns
            .into_iter()
            .map(|c| wit::Column { name: c.name, data_type: c.doris_type.to_string(), nullable: c.nullable })
            .collect(),
    })
}

fn schema_from_wit(schema: wit::Schema) -> Result<SchemaRef, String> {
    let columns = schema
        .columns
        .into_iter()
        .map(|c| {
            let t = DorisType::parse(&c.data_type).map_err(|e| format!("column `{}`: {}", c.name, e.message))?;
            Ok(ColumnDef::new(c.name, t, c.nullable))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(arrow_schema(&columns))
}

fn info_from_wit(info: wit::PluginInfo) -> PluginInfo {
    PluginInfo {
        name: info.name,
        description: info.description,
        config_keys: info.config_keys.into_iter().map(|k| (k.name, k.default_value, k.description)).collect(),
        example_input: info.example_input,
    }
}

fn rejected(plugin: &Plugin, call: &str, e: wit::PluginError) -> PluginError {
    PluginError::Rejected { plugin: plugin.name().to_string(), call: call.to_string(), row: e.row, message: e.message }
}

/// Decode and check what a plugin returned: well-formed Arrow, sane row kinds, and for the default
/// table exactly the declared output columns. An output batch whose bytes are exactly the input's
/// (`input`: the bytes sent and the batch they were encoded from) is that batch's data again, and
/// is not decoded; columns that refer to the input's are the input's.
fn check_output(
    plugin: &Plugin,
    call: &str,
    output: &SchemaRef,
    batches: Vec<wit::Batch>,
    input: Option<(&[u8], &RecordBatch)>,
) -> Result<Vec<Batch>, PluginError> {
    let malformed =
        |detail: String| PluginError::Malformed { plugin: plugin.name().to_string(), call: call.to_string(), detail };
    batches
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            let batch = Batch::from_answer((b.table, b.arrow_ipc, b.row_kinds), input)
                .map_err(|e| malformed(format!("output batch {i}: {}", e.message)))?;
            if batch.table.is_none() {
                let got = batch.schema();
                let same = got.fields().len() == output.fields().len()
                    && got
                        .fields()
                        .iter()
                        .zip(output.fields())
                        .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
                if !same {
                    return Err(malformed(format!(
                        "output batch {i} has columns ({}) but init declared ({})",
                        describe_fields(&got),
                        describe_fields(output)
                    )));
                }
            }
            Ok(batch)
        })
        .collect()
}

fn describe_fields(schema: &Schema) -> String {
    schema.fields().iter().map(|f| format!("{} {}", f.name(), f.data_type())).collect::<Vec<_>>().join(", ")
}

pub(crate) fn describe(plugin: &Plugin) -> Result<PluginInfo, PluginError> {
    let mut inst = Instance::new(plugin);
    let component = &plugin.inner.component;
    let linker = &plugin.inner.linker;
    let info = match plugin.kind() {
        super::PluginKind::Transform => {
            let b = inst.call("instantiate", |s| TransformBindings::instantiate(s, component, linker))?;
            inst.call("describe", |s| b.sluice_plugin_transformer().call_describe(s))?
        }
        super::PluginKind::Decoder => {
            let b = inst.call("instantiate", |s| DecoderBindings::instantiate(s, component, linker))?;
            inst.call("describe", |s| b.sluice_plugin_event_decoder().call_describe(s))?
        }
    };
    Ok(info_from_wit(info))
}

type InitResult = wasmtime::Result<Result<wit::Schema, wit::PluginError>>;

/// The bindings of one of the WIT worlds a plugin instance can be: how to instantiate it and call
/// its `init`.
trait World: Sized {
    fn instantiate(
        store: &mut Store<StoreState>,
        component: &Component,
        linker: &Linker<StoreState>,
    ) -> wasmtime::Result<Self>;
    fn init(&self, store: &mut Store<StoreState>, config: &wit::Config, schema: &wit::Schema) -> InitResult;
}

impl World for TransformBindings {
    fn instantiate(
        store: &mut Store<StoreState>,
        component: &Component,
        linker: &Linker<StoreState>,
    ) -> wasmtime::Result<Self> {
        TransformBindings::instantiate(store, component, linker)
    }
    fn init(&self, store: &mut Store<StoreState>, config: &wit::Config, schema: &wit::Schema) -> InitResult {
        self.sluice_plugin_transformer().call_init(store, config, schema)
    }
}

impl World for DecoderBindings {
    fn instantiate(
        store: &mut Store<StoreState>,
        component: &Component,
        linker: &Linker<StoreState>,
    ) -> wasmtime::Result<Self> {
        DecoderBindings::instantiate(store, component, linker)
    }
    fn init(&self, store: &mut Store<StoreState>, config: &wit::Config, schema: &wit::Schema) -> InitResult {
        self.sluice_plugin_event_decoder().call_init(store, config, schema)
    }
}

/// An initialised instance of world `B`, with what it takes to replace it by a fresh one when its
/// memory wears out (see `Instance::worn`).
struct Live<B> {
    inst: Instance,
    bindings: B,
    output: SchemaRef,
    batches: u64,
    config: Vec<(String, String)>,
    schema: Schema,
    renewals: u64,
}

impl<B: World> Live<B> {
    fn new(plugin: &Plugin, config: &[(String, String)], schema: &Schema) -> Result<Self, PluginError> {
        let (inst, bindings, output) = Self::start(plugin, config, schema)?;
        Ok(Self { inst, bindings, output, batches: 0, config: config.to_vec(), schema: schema.clone(), renewals: 0 })
    }

    /// Instantiate the plugin and call its `init`, returning the instance, its bindings and the
    /// declared output schema.
    fn start(
        plugin: &Plugin,
        config: &[(String, String)],
        schema: &Schema,
    ) -> Result<(Instance, B, SchemaRef), PluginError> {
        let mut inst = Instance::new(plugin);
        let (component, linker) = (&plugin.inner.component, &plugin.inner.linker);
        let bindings = inst.call("instantiate", |s| B::instantiate(s, component, linker))?;
        let schema = schema_to_wit(schema)
            .map_err(|detail| PluginError::Init { plugin: plugin.name().into(), message: detail })?;
        let config = config.to_vec();
        let output = inst
            .call("init", |s| bindings.init(s, &config, &schema))?
            .map_err(|e| PluginError::Init { plugin: plugin.name().into(), message: e.message })?;
        let output = schema_from_wit(output).map_err(|detail| PluginError::Malformed {
            plugin: plugin.name().into(),
            call: "init".into(),
            detail: format!("output schema: {detail}"),
        })?;
        Ok((inst, bindings, output))
    }

    /// Number the next call (`batch N (<what>)`), after replacing a worn instance by a fresh one
    /// with the same config, its counters carried over; the fresh one must declare the same output.
    fn next_call(&mut self, what: std::fmt::Arguments<'_>) -> Result<String, PluginError> {
        self.batches += 1;
        let call = format!("batch {} ({what})", self.batches);
        if !self.inst.worn() {
            return Ok(call);
        }
        let (mut fresh, bindings, output) = Self::start(&self.inst.plugin, &self.config, &self.schema)?;
        if output != self.output {
            return Err(PluginError::Init {
                plugin: self.inst.plugin.name().into(),
                message: "a fresh instance with the same config declared another output schema".into(),
            });
        }
        fresh.take_counters_of(&self.inst);
        tracing::debug!(
            plugin = %self.inst.plugin.name(),
            memory = self.inst.memory_bytes(),
            limit = self.inst.plugin.limits().memory,
            "plugin instance renewed: its memory wore out (a guest runtime that does not free call arguments)"
        );
        (self.inst, self.bindings) = (fresh, bindings);
        self.renewals += 1;
        Ok(call)
    }
}

/// A transform plugin instance: owned by one worker, reused for every batch (replaced by a fresh
/// one with the same config when its memory wears out, see `Instance::worn`).
pub struct PluginTransform(Live<TransformBindings>);

impl PluginTransform {
    pub(crate) fn new(plugin: &Plugin, config: &[(String, String)], input: &Schema) -> Result<Self, PluginError> {
        Live::new(plugin, config, input).map(Self)
    }

    /// How many times the instance was replaced by a fresh one (see `Instance::worn`).
    pub fn renewals(&self) -> u64 {
        self.0.renewals
    }

    /// The size of the instance's largest linear memory, in bytes.
    pub fn memory_bytes(&self) -> u64 {
        self.0.inst.memory_bytes()
    }

    /// The schema of the batches this instance produces for the default table.
    pub fn output_schema(&self) -> &SchemaRef {
        &self.0.output
    }

    /// Transform one batch. On error nothing of this batch may be passed downstream.
    pub fn process(&mut self, batch: &Batch) -> Result<Vec<Batch>, PluginError> {
        let live = &mut self.0;
        let call = live.next_call(format_args!("{} rows", batch.num_rows()))?;
        let plugin = live.inst.plugin.clone();
        let (table, arrow_ipc, row_kinds) = batch.to_wire().map_err(|e| PluginError::Malformed {
            plugin: plugin.name().into(),
            call: call.clone(),
            detail: format!("input cannot be encoded: {}", e.message),
        })?;
        let input = wit::Batch { table, arrow_ipc, row_kinds };
        let bindings = &live.bindings;
        let result = live.inst.call(&call, |s| bindings.sluice_plugin_transformer().call_process(s, &input))?;
        let batches = result.map_err(|e| rejected(&plugin, &call, e))?;
        check_output(&plugin, &call, &live.output, batches, Some((&input.arrow_ipc, &batch.data)))
    }

    /// The plugin's metric counters so far.
    pub fn counters(&self) -> BTreeMap<String, u64> {
        self.0.inst.counters()
    }
}

/// A decoder plugin instance: owned by one worker, reused for every run of messages (replaced
/// by a fresh one with the same config when its memory wears out, see `Instance::worn`).
pub struct DecoderInstance(Live<DecoderBindings>);

impl DecoderInstance {
    pub(crate) fn new(plugin: &Plugin, config: &[(String, String)], declared: &Schema) -> Result<Self, PluginError> {
        Live::new(plugin, config, declared).map(Self)
    }

    pub fn output_schema(&self) -> &SchemaRef {
        &self.0.output
    }

    /// Decode a run of raw messages into batches with row kinds.
    pub fn decode<M: AsRef<[u8]>>(&mut self, messages: &[M]) -> Result<Vec<Batch>, PluginError> {
        let live = &mut self.0;
        let call = live.next_call(format_args!("{} messages", messages.len()))?;
        let plugin = live.inst.plugin.clone();
        let total: usize = messages.iter().map(|m| m.as_ref().len()).sum();
        let mut data = Vec::with_capacity(total);
        let mut offsets = Vec::with_capacity(messages.len() + 1);
        offsets.push(0u32);
        for m in messages {
            data.extend_from_slice(m.as_ref());
            let end = u32::try_from(data.len()).map_err(|_| PluginError::Malformed {
                plugin: plugin.name().into(),
                call: call.clone(),
                detail: "input over 4 GiB; decode fewer messages per call".into(),
            })?;
            offsets.push(end);
        }
        let input = wit::Messages { data, offsets };
        let bindings = &live.bindings;
        let result = live.inst.call(&call, |s| bindings.sluice_plugin_event_decoder().call_decode(s, &input))?;
        let batches = result.map_err(|e| rejected(&plugin, &call, e))?;
        check_output(&plugin, &call, &live.output, batches, None)
    }

    pub fn counters(&self) -> BTreeMap<String, u64> {
        self.0.inst.counters()
    }
}
