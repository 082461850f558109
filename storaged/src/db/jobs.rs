//! A queued write and how it is answered.

use crate::error::StoreError;
use crate::sql::Connection;
use tokio::sync::oneshot;

pub(super) type Finish = Box<dyn FnOnce(Result<(), GroupFailure>) + Send>;

/// The answers of one commit, given together.
pub(super) type Answers = Box<dyn FnOnce() + Send>;

thread_local! {
    /// Where the writer thread hands a commit's answers ([`answerer`]).
    static ANSWERER: std::cell::RefCell<Option<tokio::sync::mpsc::UnboundedSender<Answers>>> =
        const { std::cell::RefCell::new(None) };
}

/// A task on the current runtime that gives each commit's answers, for the writer
/// thread ([`set_answerer`]); `None` outside a runtime. Each answer wakes the task
/// waiting for it: woken from the writer thread, every one of them would wake the
/// runtime from outside (an `eventfd` write each, 20–25 a commit under load, and as
/// many wake-ups of a runtime that may have gone back to sleep between them); woken
/// from this task, on the runtime's own thread, they only queue their tasks, and a
/// commit costs the runtime one wake-up. The channel holds at most one entry per
/// queued write (the writer's queue bounds them).
pub(super) fn answerer() -> Option<tokio::sync::mpsc::UnboundedSender<Answers>> {
    let handle = tokio::runtime::Handle::try_current().ok()?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Answers>();
    handle.spawn(async move {
        while let Some(answers) = rx.recv().await {
            answers();
        }
    });
    Some(tx)
}

/// Make `tx` where this (the writer) thread hands its commits' answers.
pub(super) fn set_answerer(tx: Option<tokio::sync::mpsc::UnboundedSender<Answers>>) {
    ANSWERER.with(|a| *a.borrow_mut() = tx);
}

/// Answer each write of a commit with its `outcome`: through the answerer where
/// there is one (and it still runs), else right here.
pub(super) fn answer_all(finishes: Vec<Finish>, outcome: Result<(), GroupFailure>) {
    let answers: Answers = Box::new(move || {
        for finish in finishes {
            finish(outcome.clone());
        }
    });
    let unsent = ANSWERER.with(|a| match a.borrow().as_ref() {
        Some(tx) => tx.send(answers).err().map(|e| e.0),
        None => Some(answers),
    });
    if let Some(answers) = unsent {
        answers();
    }
}

/// Why a group's transaction did not commit.
#[derive(Debug, Clone)]
pub(super) enum GroupFailure {
    /// The database could not be reached (or the connection went mid-way).
    Unavailable(String),
    /// The disk is full: nothing was written.
    Full(String),
    /// Anything else.
    Failed(String),
}

impl GroupFailure {
    pub(super) fn of(e: crate::sql::Error) -> GroupFailure {
        if let Some(m) = e.full() {
            return GroupFailure::Full(m);
        }
        match e {
            crate::sql::Error::ConnectionLost(m) | crate::sql::Error::OverBound(m) => {
                GroupFailure::Unavailable(m)
            }
            other => GroupFailure::Failed(other.to_string()),
        }
    }

    pub(super) fn to_error(&self, doing: &str) -> StoreError {
        match self {
            GroupFailure::Unavailable(m) => StoreError::Unavailable(m.clone()),
            GroupFailure::Full(m) => StoreError::Full(format!("{doing}: {m}")),
            GroupFailure::Failed(m) => StoreError::Internal(format!("{doing}: {m}")),
        }
    }
}

/// What the writer thread receives.
pub(super) enum Msg {
    Job(Box<dyn Job>),
    /// Finish what is queued and stop.
    Stop,
}

/// One queued write.
pub(super) trait Job: Send {
    /// Run inside the savepoint: whether it succeeded, and how to answer once the
    /// transaction's fate is known.
    fn run(self: Box<Self>, conn: &Connection) -> (bool, Finish);
    /// Answer without running (the transaction could not begin).
    fn fail(self: Box<Self>, why: StoreError);
    /// Whether the job may run more than once: its writes are all it does, so a
    /// run whose transaction was rolled back can be run again ([`Store::write_repeatable`]).
    fn repeatable(&self) -> bool {
        false
    }
    /// Run a repeatable job, keeping its result for [`Job::settle`]: whether it
    /// succeeded. Never called on a job that is not repeatable.
    fn attempt(&mut self, _conn: &Connection) -> bool {
        false
    }
    /// How to answer an [`Job::attempt`] once the transaction's fate is known.
    fn settle(self: Box<Self>) -> Finish {
        Box::new(|_| {})
    }
    /// Its part in the statement its group runs first (PostgreSQL, repeatable
    /// jobs only): [`super::Ahead`].
    fn ahead(&self) -> Option<&dyn super::Ahead> {
        None
    }
}

pub(super) struct TypedJob<T, F> {
    pub(super) f: F,
    pub(super) tx: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job for TypedJob<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &Connection) -> (bool, Finish) {
        let TypedJob { f, tx } = *self;
        let result = f(conn);
        (result.is_ok(), answer(result, tx))
    }

    fn fail(self: Box<Self>, why: StoreError) {
        let _ = self.tx.send(Err(why));
    }
}

/// A job whose closure is `Fn` and writes nothing outside its transaction: it
/// can be run, rolled back and run again.
pub(super) struct RepeatableJob<T, F> {
    pub(super) f: F,
    pub(super) tx: oneshot::Sender<Result<T, StoreError>>,
    pub(super) kept: Option<Result<T, StoreError>>,
    pub(super) ahead: Option<Box<dyn super::Ahead>>,
}

/// The answer to a job that ran: its result, or the commit's failure when the
/// job succeeded but its transaction did not commit.
fn answer<T: Send + 'static>(
    result: Result<T, StoreError>,
    tx: oneshot::Sender<Result<T, StoreError>>,
) -> Finish {
    let ok = result.is_ok();
    Box::new(move |committed: Result<(), GroupFailure>| {
        let answer = match committed {
            Err(e) if ok => Err(e.to_error("commit failed")),
            _ => result,
        };
        let _ = tx.send(answer);
    })
}

impl<T, F> Job for RepeatableJob<T, F>
where
    T: Send + 'static,
    F: Fn(&Connection) -> Result<T, StoreError> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &Connection) -> (bool, Finish) {
        let RepeatableJob { f, tx, .. } = *self;
        let result = f(conn);
        (result.is_ok(), answer(result, tx))
    }

    fn fail(self: Box<Self>, why: StoreError) {
        let _ = self.tx.send(Err(why));
    }

    fn repeatable(&self) -> bool {
        true
    }

    fn attempt(&mut self, conn: &Connection) -> bool {
        let result = (self.f)(conn);
        let ok = result.is_ok();
        self.kept = Some(result);
        ok
    }

    fn ahead(&self) -> Option<&dyn super::Ahead> {
        self.ahead.as_deref()
    }

    fn settle(self: Box<Self>) -> Finish {
        let RepeatableJob { tx, kept, .. } = *self;
        let result = kept.unwrap_or_else(|| {
            Err(StoreError::Internal(
                "a write was answered before it ran".into(),
            ))
        });
        answer(result, tx)
    }
}
