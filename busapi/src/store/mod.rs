//! storaged's methods (`store.*`): the database's one door. Each module holds the
//! wire types of one part of the store; this module names every method.

pub mod artifacts;
pub mod commit;
pub mod config;
pub mod events;
pub mod kv;
pub mod reserved;
pub mod resources;
pub mod retention;
pub mod stats;
pub mod timers;
pub mod waits;
pub mod work;

pub use artifacts::*;
pub use commit::*;
pub use config::*;
pub use events::*;
pub use kv::*;
pub use reserved::*;
pub use resources::*;
pub use retention::*;
pub use stats::*;
pub use timers::*;
pub use waits::*;
pub use work::*;

/// `store.methods`: no fields.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MethodsRequest {}

/// The answer of `store.methods`: every method storaged serves.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct MethodsResponse {
    /// The method names.
    pub methods: Vec<String>,
}

/// `store.metrics`: no fields; answers the daemon's samples ([`crate::metrics`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MetricsRequest {}

crate::methods! {
    "store.methods": MethodsRequest => MethodsResponse,
    "store.metrics": MetricsRequest => crate::metrics::MetricsText,
    "store.kv_layout_get": KvLayoutGetRequest => KvLayoutGetResponse,
    "store.kv_layout_set": KvLayoutSetRequest => KvLayoutSetResponse,
    "store.tunnel_get": TunnelGetRequest => TunnelGetResponse,
    "store.tunnel_set": TunnelRecord => TunnelSetResponse,
    "store.kv_get": KvGetRequest => KvGetResponse,
    "store.kv_list": KvListRequest => KvListResponse,
    "store.stats": StatsRequest => StatsResponse,
    "store.check": CheckRequest => CheckResponse,
    "store.artifact_create": ArtifactCreateRequest => ArtifactCreateResponse,
    "store.artifact_write": ArtifactWriteRequest => ArtifactWriteResponse,
    "store.artifact_commit": ArtifactCommitRequest => ArtifactCommitResponse,
    "store.artifact_abort": ArtifactAbortRequest => ArtifactAbortResponse,
    "store.artifact_read": ArtifactReadRequest => ArtifactReadResponse,
    "store.artifact_get": ArtifactGetRequest => Artifact,
    "store.artifacts": ArtifactsRequest => ArtifactsResponse,
    "store.kv_commit": KvCommitRequest => KvCommitResponse,
    "store.waits": WaitsRequest => WaitsResponse,
    "store.wait_wake": WaitWakeRequest => WaitWakeResponse,
    "store.wait_progress": WaitProgressRequest => WaitProgressResponse,
    "store.waits_matching": WaitsMatchingRequest => WaitsResponse,
    "store.timer_arm": TimerArmRequest => TimerArmResponse,
    "store.timer_cancel": TimerCancelRequest => TimerCancelResponse,
    "store.timers_due": TimersDueRequest => TimersResponse,
    "store.timer_fire": TimerFireRequest => TimerFireResponse,
    "store.timers": TimersRequest => TimersResponse,
    "store.retention_run": RetentionRunRequest => RetentionRunResponse,
    "store.resource_lease_put": LeasePutRequest => LeasePutResponse,
    "store.resource_leases": LeasesRequest => LeasesResponse,
    "store.resource_lease_drop": LeaseDropRequest => LeaseDropResponse,
    "store.owner_status": OwnerStatusRequest => OwnerStatusResponse,
    "store.config_apply": ConfigApplyRequest => ConfigApplyResponse,
    "store.config_current": ConfigCurrentRequest => ConfigGeneration,
    "store.config_generation": ConfigGenerationRequest => ConfigGeneration,
    "store.events_accept": EventsAcceptRequest => EventsAcceptResponse,
    "store.event_accept_derived": EventAcceptDerivedRequest => AcceptedEvent,
    "store.checkpoint_get": CheckpointGetRequest => CheckpointGetResponse,
    "store.checkpoint_set": CheckpointSetRequest => CheckpointSetResponse,
    "store.event": EventGetRequest => EventGetResponse,
    "store.events": EventsListRequest => EventsPageResponse,
    "store.work_events": WorkEventsRequest => EventsPageResponse,
    "store.sequence": SequenceRequest => SequenceResponse,
    "store.route_decide": RouteDecideRequest => RouteDecideResponse,
    "store.route_decide_many": RouteDecideManyRequest => RouteDecideManyResponse,
    "store.unrouted": UnroutedRequest => UnroutedResponse,
    "store.routing": RoutingRequest => RoutingResponse,
    "store.attempt_start": AttemptStartRequest => AttemptStartResponse,
    "store.lease_renew": LeaseRenewRequest => LeaseRenewResponse,
    "store.lease_takeover": LeaseTakeoverRequest => LeaseTakeoverResponse,
    "store.recovery_persist": RecoveryPersistRequest => RecoveryPersistResponse,
    "store.attempt_settle": AttemptSettleRequest => AttemptSettleResponse,
    "store.expired_leases": ExpiredLeasesRequest => ExpiredLeasesResponse,
    "store.works_ready": WorksReadyRequest => WorksReadyResponse,
    "store.work_cancel": WorkCancelRequest => WorkCancelResponse,
    "store.work_retry": WorkRetryRequest => WorkRetryResponse,
    "store.action_accept": ActionAcceptRequest => ActionAcceptResponse,
    "store.work_hold": WorkHoldRequest => WorkHoldResponse,
    "store.work_settle_hold": WorkSettleHoldRequest => WorkSettleHoldResponse,
    "store.work_get": WorkGetRequest => WorkGetResponse,
    "store.works": WorksRequest => WorksResponse,
    "store.executions": ExecutionsRequest => ExecutionsResponse,
    "store.work_inputs": WorkInputsRequest => WorkInputsResponse,
    "store.host_beat": HostBeatRequest => HostBeatResponse,
    "store.hosts": HostsRequest => HostsResponse,
    "store.task_claim": TaskClaimRequest => TaskClaimResponse,
}
