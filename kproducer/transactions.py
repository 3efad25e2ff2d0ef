"""Transactions: Java's TransactionManager, and a prepared transaction any process can finish.

States (Java's, plus PREPARED for the two-phase commit), all transitions in
:data:`_VALID_FROM`::

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION -> COMMITTING -> READY
                                              IN_TRANSACTION -> ABORTING   -> READY
                                              IN_TRANSACTION -> PREPARED   -> COMMITTING / ABORTING
                                  any error inside a transaction -> ABORTABLE_ERROR -> ABORTING
                                  fenced, unauthorized, ...      -> FATAL_ERROR (only close())

The user's thread changes the state and queues requests; the Sender thread sends them
(:mod:`kproducer.coordinator`) and keeps partitions out of Produce requests until
AddPartitionsToTxn has added them to the transaction. Batches carry the transactional
attribute bit and the producer id and epoch from InitProducerId.

``prepare_transaction()`` flushes and registers everything but does not send EndTxn;
the :class:`PreparedTransaction` it returns (transactional id, producer id, epoch) is
enough for any producer, in any process, to send that EndTxn
(``Producer.complete_transaction``). Finishing twice is harmless: a coordinator answers
an EndTxn for a transaction that already ended that way with success.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading

from kproducer.coordinator import (KEY_GROUP, KEY_TRANSACTION, PRIORITY_ADD, PRIORITY_END,
                                   PRIORITY_INIT, Handler, TxnResult)
from kproducer.errors import (InvalidTxnStateError, KafkaError, ProducerFencedError,
                              TransactionAbortableError, TransactionAbortedError,
                              TransactionFatalError)
from kproducer.protocol import messages as m
from kproducer.protocol import versions as v
from kproducer.protocol.errors_table import ErrorCode, broker_error

log = logging.getLogger(__name__)


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    PREPARED = "PREPARED"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TxnState
# Java's TransactionManager.State.isTransitionValid, with PREPARED (KIP-939's
# PREPARED_TRANSACTION) and the epoch bump after an abort (ABORTING -> INITIALIZING).
_VALID_FROM = {
    S.INITIALIZING: {S.UNINITIALIZED, S.ABORTING},
    S.READY: {S.INITIALIZING, S.COMMITTING, S.ABORTING},
    S.IN_TRANSACTION: {S.READY},
    S.COMMITTING: {S.IN_TRANSACTION, S.PREPARED},
    S.ABORTING: {S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.PREPARED},
    S.PREPARED: {S.IN_TRANSACTION},
    S.ABORTABLE_ERROR: {S.IN_TRANSACTION, S.COMMITTING, S.ABORTABLE_ERROR, S.PREPARED},
    S.FATAL_ERROR: set(S),
}

# Broker answers that end the producer (Java: fatal errors of the transactional producer).
_FENCED = {ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
           ErrorCode.TRANSACTION_COORDINATOR_FENCED}
_FATAL = {ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.INVALID_PRODUCER_ID_MAPPING,
          ErrorCode.INVALID_TXN_STATE, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
          ErrorCode.INVALID_TRANSACTION_TIMEOUT, ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
RETRY = {ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
         ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT}


@dataclasses.dataclass(frozen=True)
class PreparedTransaction:
    """A transaction that is flushed and registered with its coordinator but not ended:
    ``Producer.complete_transaction(prepared, commit=True)`` on any producer, in any
    process, commits (or aborts) it. Small and picklable."""

    transactional_id: str
    producer_id: int
    epoch: int


def fencing_error(code: int, what: str) -> ProducerFencedError:
    exc = ProducerFencedError(
        f"{what}: the producer is fenced: another producer with the same transactional.id "
        f"has initialized since ({broker_error(code).name}); close this one")
    exc.code = code
    return exc


def txn_error_for(code: int, what: str) -> KafkaError:
    """The exception a transactional request's error code becomes."""
    if code in _FENCED:
        return fencing_error(code, what)
    exc = broker_error(code, what)
    if code == ErrorCode.INVALID_TXN_STATE:
        return InvalidTxnStateError(str(exc))
    return exc


class TransactionManager:
    """The transactional state of one producer; see the module docstring."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int, sender):
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.sender = sender
        self.requests = sender.coordinator
        context = getattr(sender, "log_context", None)     # the producer's logger, if any
        self.log = context.logger(__name__) if context is not None else log
        self.state = S.UNINITIALIZED
        self.last_error: BaseException | None = None
        self._lock = threading.Lock()
        self.partitions_in_txn: set = set()     # added by AddPartitionsToTxn
        self.new_partitions: set = set()        # have batches, not yet asked for
        self.pending_partitions: set = set()    # in an AddPartitionsToTxn in flight
        self.started = False                    # anything registered with the coordinator
        self._init_result: TxnResult | None = None
        self._end_result: TxnResult | None = None
        self._need_epoch_bump = False
        self._committing = False
        self.on_state_change = None             # callable(sending_allowed: bool)

    # -- state ---------------------------------------------------------------------------

    def _transition(self, target: TxnState, error: BaseException | None = None) -> None:
        with self._lock:
            if self.state is S.FATAL_ERROR and target is not S.FATAL_ERROR:
                raise self.last_error
            if self.state not in _VALID_FROM[target]:
                raise InvalidTxnStateError(
                    f"transactional.id {self.transactional_id!r}: invalid transition from "
                    f"{self.state.value} to {target.value}")
            self.log.debug("transaction %r: %s -> %s", self.transactional_id, self.state.value, target.value)
            self.state = target
            if error is not None:
                self.last_error = error
        if self.on_state_change is not None:
            self.on_state_change(target is S.IN_TRANSACTION)

    def _raise_if_failed(self, what: str) -> None:
        if self.state is S.FATAL_ERROR:
            raise self.last_error
        if self.state is S.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                f"cannot {what}: the transaction must be aborted, an operation in it failed: "
                f"{self.last_error}") from self.last_error

    def fatal(self, exc: BaseException) -> None:
        if not isinstance(exc, (ProducerFencedError, TransactionFatalError)):
            exc = TransactionFatalError(f"transactional.id {self.transactional_id!r}: {exc}")
        if self.state is not S.FATAL_ERROR:
            self.log.error("transactional producer %r failed: %s", self.transactional_id, exc)
            self._transition(S.FATAL_ERROR, exc)
            errors = getattr(self.sender, "errors", None)
            if errors is not None:
                errors.report(("fatal",), exc)
        for res in (self._init_result, self._end_result):
            if res is not None and not res.done:
                res.fail(exc)

    def abortable(self, exc: BaseException) -> None:
        """An operation inside the transaction failed (I/O thread or user thread)."""
        if self.state in (S.IN_TRANSACTION, S.COMMITTING, S.PREPARED, S.ABORTABLE_ERROR):
            if isinstance(exc, (ProducerFencedError, TransactionFatalError)):
                self.fatal(exc)
                return
            self._transition(S.ABORTABLE_ERROR, exc)
            if self._end_result is not None and not self._end_result.done and self._committing:
                self._end_result.fail(TransactionAbortableError(
                    f"cannot commit: the transaction must be aborted, an operation in it "
                    f"failed: {exc}"))

    # -- user thread ---------------------------------------------------------------------

    def check_send(self) -> None:
        """Raises unless a record may be sent now (Java's failIfNotReadyForSend)."""
        if self.state is S.IN_TRANSACTION:
            return
        self._raise_if_failed("send")
        raise InvalidTxnStateError(
            f"cannot send: transactional.id {self.transactional_id!r} is in state "
            f"{self.state.value}; records are sent between begin_transaction() and "
            f"commit_transaction()/abort_transaction()")

    def _unclaimed(self, res: TxnResult | None, states) -> bool:
        """Whether ``res`` is an operation that a call gave up waiting for (it timed out)
        and that finished in the background since: the retried call gets its outcome."""
        return res is not None and not res.acked and self.state in states

    def init(self) -> TxnResult:
        if self.state is S.INITIALIZING and self._init_result is not None:
            return self._init_result        # a retry after a timeout waits for the same one
        if self._unclaimed(self._init_result, (S.READY,)):
            return self._init_result
        if self.state is not S.UNINITIALIZED:
            self._raise_if_failed("init_transactions")
            raise InvalidTxnStateError(
                f"init_transactions: transactional.id {self.transactional_id!r} is already "
                f"initialized (state {self.state.value})")
        self._transition(S.INITIALIZING)
        self._init_result = TxnResult("init_transactions")
        self.requests.enqueue(_InitProducerId(self, self._init_result))
        return self._init_result

    def begin(self) -> None:
        if self.state is not S.READY:
            self._raise_if_failed("begin_transaction")
            what = ("call init_transactions() first" if self.state in (S.UNINITIALIZED, S.INITIALIZING)
                    else "a transaction is already open" if self.state is S.IN_TRANSACTION
                    else f"the producer is in state {self.state.value}")
            raise InvalidTxnStateError(f"begin_transaction: {what}")
        self.partitions_in_txn.clear()
        self.new_partitions.clear()
        self.pending_partitions.clear()
        self.started = False
        # The accumulator asks for a step when a partition starts its first batch of this
        # transaction, so that AddPartitionsToTxn goes out with the first records.
        acc = self.sender.acc
        acc.txn_generation = (acc.txn_generation + 1) & 0xFFFFFFFF or 1
        acc.txn_add_step = True
        self._transition(S.IN_TRANSACTION)

    def begin_commit(self) -> TxnResult:
        if self.state is S.COMMITTING and self._end_result is not None:
            return self._end_result
        if self._committing and self._unclaimed(self._end_result, (S.READY,)):
            return self._end_result         # committed after the call that asked timed out
        if self.state not in (S.IN_TRANSACTION, S.PREPARED):
            self._raise_if_failed("commit_transaction")
            raise InvalidTxnStateError(
                f"commit_transaction: no open transaction (state {self.state.value}); "
                f"call begin_transaction() first")
        self._transition(S.COMMITTING)
        return self._end(commit=True)

    def begin_abort(self) -> TxnResult:
        if self.state is S.ABORTING and self._end_result is not None:
            return self._end_result
        if not self._committing and self._unclaimed(self._end_result, (S.READY, S.INITIALIZING)):
            return self._end_result         # aborted (and re-initialized) in the background
        if self.state is S.FATAL_ERROR:
            raise self.last_error
        if self.state not in (S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.PREPARED):
            raise InvalidTxnStateError(
                f"abort_transaction: no open transaction (state {self.state.value})")
        self._transition(S.ABORTING)
        return self._end(commit=False)

    def _end(self, *, commit: bool) -> TxnResult:
        self._committing = commit
        res = self._end_result = TxnResult("commit_transaction" if commit else "abort_transaction")
        self.sender.wakeup()
        if not commit:
            self.sender.abort_undrained(TransactionAbortedError(
                f"transaction of {self.transactional_id!r} aborted before the record was sent"))
        # A commit that failed (abortable error) may still be queued: it must never go out.
        self.requests.remove_if(lambda h: isinstance(h, _EndTxn) and h.txn is self)
        self.requests.enqueue(_EndTxn(self, res, commit))
        return res

    def begin_prepare(self) -> None:
        if self.state is not S.IN_TRANSACTION:
            self._raise_if_failed("prepare_transaction")
            raise InvalidTxnStateError(
                f"prepare_transaction: no open transaction (state {self.state.value})")

    def finish_prepare(self) -> PreparedTransaction:
        """After a flush: every batch acknowledged and every partition added."""
        self._raise_if_failed("prepare_transaction")
        if self.new_partitions or self.pending_partitions:
            raise KafkaError("prepare_transaction: partitions are still being added")
        self._transition(S.PREPARED)
        return PreparedTransaction(self.transactional_id, self.sender.producer_id, self.sender.producer_epoch)

    def add_offsets(self, offsets: dict, group: dict) -> TxnResult:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator."""
        if self.state is not S.IN_TRANSACTION:
            self._raise_if_failed("send_offsets_to_transaction")
            raise InvalidTxnStateError(
                f"send_offsets_to_transaction: no open transaction (state {self.state.value})")
        res = TxnResult("send_offsets_to_transaction")
        self.requests.enqueue(_AddOffsets(self, res, offsets, group))
        return res

    # -- Sender thread -------------------------------------------------------------------

    def unsendable(self, partitions_with_batches, muted: set) -> set:
        """``muted`` plus the partitions whose batches must wait for AddPartitionsToTxn;
        queues the request for partitions seen for the first time."""
        new = [tp for tp in partitions_with_batches
               if tp not in self.partitions_in_txn and tp not in self.pending_partitions
               and tp not in self.new_partitions]
        if new and self.state in (S.IN_TRANSACTION, S.COMMITTING):
            self.new_partitions.update(new)
            self.pending_partitions.update(self.new_partitions)
            parts, self.new_partitions = self.new_partitions, set()
            # No wakeup: the step that asks runs the coordinator next.
            self.requests.enqueue(_AddPartitions(self, TxnResult("AddPartitionsToTxn"), parts),
                                  wake=False)
            # Partitions new meanwhile wait for the step that reads its response.
            self.sender.acc.txn_add_step = False
        blocked = self.new_partitions | self.pending_partitions
        if new and self.state not in (S.IN_TRANSACTION, S.COMMITTING):
            blocked = blocked | set(new)
        return muted | blocked if blocked else muted

    def produce_error(self, code: int, exc: KafkaError) -> KafkaError:
        """What a Produce error code means to a record of a transactional producer."""
        return fencing_error(code, str(exc)) if code in _FENCED else exc

    def on_batch_failed(self, exc: BaseException) -> None:
        code = getattr(exc, "code", None)
        if isinstance(exc, ProducerFencedError):
            self.fatal(exc)
        elif code in _FENCED:
            self.fatal(fencing_error(code, "Produce"))
        elif self.state is not S.ABORTING and not isinstance(exc, TransactionAbortedError):
            self.abortable(exc)

    def on_sequence_error(self, exc: BaseException) -> None:
        """OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID / a sequenced batch that
        failed: the transaction must abort, and the next one starts at a new epoch
        (InitProducerId again) with sequences from 0."""
        self._need_epoch_bump = True
        if self.state is not S.ABORTING:
            self.abortable(exc)

    def courier_may_send(self) -> bool:
        """Whether the courier (csrc/kp_courier.h) may send between steps: only while the
        transaction is open, and to the partitions it has added. A commit lets the courier
        go on (what it sends belongs to the transaction, and EndTxn waits for it); an abort
        takes what it sent before it fails the rest (Sender.abort_undrained)."""
        return self.state is S.IN_TRANSACTION and bool(self.partitions_in_txn)

    def has_incomplete_batches(self) -> bool:
        return bool(self.sender.acc.incomplete) or bool(self.new_partitions or self.pending_partitions)

    def _ended(self, commit: bool) -> None:
        self.partitions_in_txn.clear()
        self.new_partitions.clear()
        self.pending_partitions.clear()
        self.started = False
        if not commit and self._need_epoch_bump:
            # Renumbering needs a new epoch: InitProducerId again (Tansu and Kafka both
            # bump the epoch of a transactional id on every InitProducerId).
            self._need_epoch_bump = False
            self._transition(S.INITIALIZING)
            res = self._end_result
            self._init_result = TxnResult("abort_transaction (new epoch)")
            self._init_result.acked = True      # the abort's caller waits on its own result
            self.requests.enqueue(_InitProducerId(self, self._init_result, then=res))
            return
        self._transition(S.READY)
        self._end_result.succeed()


# -- requests ----------------------------------------------------------------------------

class _TxnHandler(Handler):
    key_type = KEY_TRANSACTION

    def __init__(self, txn: TransactionManager, result: TxnResult):
        super().__init__(txn.transactional_id, result)
        self.txn = txn

    def pid(self):
        return self.txn.sender.producer_id, self.txn.sender.producer_epoch

    def fail_with(self, code: int, what: str) -> None:
        exc = txn_error_for(code, what)
        if code in _FENCED or code in _FATAL:
            self.txn.fatal(exc if code in _FENCED else TransactionFatalError(str(exc)))
            self.result.fail(self.txn.last_error)
        else:
            self.txn.abortable(exc)
            self.result.fail(TransactionAbortableError(f"{what} failed: {exc}"))


class _InitProducerId(_TxnHandler):
    api_key = v.INIT_PRODUCER_ID
    priority = PRIORITY_INIT

    def __init__(self, txn, result, then: TxnResult | None = None):
        super().__init__(txn, result)
        self.then = then

    def build(self):
        return m.InitProducerIdRequest(transactional_id=self.txn.transactional_id,
                                       transaction_timeout_ms=self.txn.transaction_timeout_ms)

    def on_response(self, resp):
        code = resp.error_code
        if code in RETRY:
            return code
        if code:
            exc = txn_error_for(code, "InitProducerId")
            self.txn.fatal(exc if code in _FENCED else TransactionFatalError(str(exc)))
            self.result.fail(self.txn.last_error)
            if self.then is not None:
                self.then.fail(self.txn.last_error)
            return None
        self.txn.sender.set_producer_id(resp.producer_id, resp.producer_epoch)
        self.txn._transition(S.READY)
        self.result.succeed()
        if self.then is not None:
            self.then.succeed()
        return None


class _AddPartitions(_TxnHandler):
    api_key = v.ADD_PARTITIONS_TO_TXN
    priority = PRIORITY_ADD

    def __init__(self, txn, result, partitions: set):
        super().__init__(txn, result)
        self.partitions = set(partitions)

    def build(self):
        by_topic: dict = {}
        for t, p in sorted(self.partitions):
            by_topic.setdefault(t, []).append(p)
        pid, epoch = self.pid()
        return m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.key, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[m.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

    def on_response(self, resp):
        txn = self.txn
        retry = None
        failed = []
        for topic in resp.results_by_topic_v3_and_below:
            for r in topic.results_by_partition:
                tp = (topic.name, r.partition_index)
                code = r.partition_error_code
                if code == 0:
                    txn.pending_partitions.discard(tp)
                    txn.partitions_in_txn.add(tp)
                    txn.started = True
                    self.partitions.discard(tp)
                elif code in RETRY or code == ErrorCode.OPERATION_NOT_ATTEMPTED:
                    retry = code if code != ErrorCode.OPERATION_NOT_ATTEMPTED else retry
                else:
                    failed.append((tp, code))
        if failed:
            tp, code = failed[0]
            for t in self.partitions:
                txn.pending_partitions.discard(t)
            # The transaction must abort; abort_transaction() fails the batches of the
            # partitions that were never added.
            self.fail_with(code, f"AddPartitionsToTxn for {tp[0]}-{tp[1]}")
            return None
        if self.partitions:
            return retry if retry is not None else ErrorCode.CONCURRENT_TRANSACTIONS
        self.result.succeed()
        if not txn.pending_partitions:
            txn.sender.acc.txn_add_step = True
        txn.sender.wakeup()
        return None


class _AddOffsets(_TxnHandler):
    """AddOffsetsToTxn to the transaction coordinator; on success queues the
    TxnOffsetCommit to the group coordinator (Java's AddOffsetsToTxnHandler)."""
    api_key = v.ADD_OFFSETS_TO_TXN
    priority = PRIORITY_ADD

    def __init__(self, txn, result, offsets: dict, group: dict):
        super().__init__(txn, result)
        self.offsets = offsets
        self.group = group

    def build(self):
        pid, epoch = self.pid()
        return m.AddOffsetsToTxnRequest(transactional_id=self.key, producer_id=pid,
                                        producer_epoch=epoch, group_id=self.group["group_id"])

    def on_response(self, resp):
        code = resp.error_code
        if code in RETRY:
            return code
        if code:
            self.fail_with(code, f"AddOffsetsToTxn for group {self.group['group_id']!r}")
            return None
        self.txn.started = True
        self.txn.requests.enqueue(_TxnOffsetCommit(self.txn, self.result, self.offsets, self.group))
        return None


class _TxnOffsetCommit(_TxnHandler):
    api_key = v.TXN_OFFSET_COMMIT
    priority = PRIORITY_ADD
    key_type = KEY_GROUP

    def __init__(self, txn, result, offsets: dict, group: dict):
        super().__init__(txn, result)
        self.key = group["group_id"]
        self.offsets = offsets
        self.group = group

    def build(self):
        pid, epoch = self.pid()
        by_topic: dict = {}
        for (t, p), (offset, meta) in sorted(self.offsets.items()):
            by_topic.setdefault(t, []).append(m.TxnOffsetCommitRequestPartition(
                partition_index=p, committed_offset=offset, committed_metadata=meta))
        g = self.group
        return m.TxnOffsetCommitRequest(
            transactional_id=self.txn.transactional_id, group_id=g["group_id"], producer_id=pid,
            producer_epoch=epoch, generation_id=g["generation_id"], member_id=g["member_id"],
            group_instance_id=g["group_instance_id"],
            topics=[m.TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

    def on_response(self, resp):
        retry = None
        for topic in resp.topics:
            for r in topic.partitions:
                code = r.error_code
                if code == 0:
                    self.offsets.pop((topic.name, r.partition_index), None)
                elif code in RETRY or code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                    retry = code if code in RETRY else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                else:
                    self.fail_with(code, f"TxnOffsetCommit for {topic.name}-{r.partition_index}")
                    return None
        if self.offsets:
            return retry if retry is not None else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        self.result.succeed()
        return None


class _EndTxn(_TxnHandler):
    api_key = v.END_TXN
    priority = PRIORITY_END

    def __init__(self, txn, result, commit: bool):
        super().__init__(txn, result)
        self.commit = commit

    def ready(self) -> bool:
        # Every batch of the transaction acknowledged (or failed) first, as Java's Sender
        # does before it lets EndTxn go.
        return not self.txn.has_incomplete_batches()

    def build(self):
        if self.commit and self.txn.state is S.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                f"cannot commit: the transaction must be aborted, an operation in it failed: "
                f"{self.txn.last_error}")
        if self.txn.state is not (S.COMMITTING if self.commit else S.ABORTING):
            raise InvalidTxnStateError(f"EndTxn(commit={self.commit}) in state {self.txn.state.value}")
        pid, epoch = self.pid()
        if not self.txn.started:
            # Nothing was registered with the coordinator: nothing to end (Java completes
            # such a transaction locally).
            self.txn._ended(self.commit)
            return None
        return m.EndTxnRequest(transactional_id=self.key, producer_id=pid, producer_epoch=epoch,
                               committed=self.commit)

    def on_response(self, resp):
        code = resp.error_code
        if code in RETRY:
            return code
        if code:
            exc = txn_error_for(code, "EndTxn")
            self.txn.fatal(exc if code in _FENCED else TransactionFatalError(str(exc)))
            self.result.fail(self.txn.last_error)
            return None
        self.txn._ended(self.commit)
        return None


class CompleteTxn(Handler):
    """EndTxn for a :class:`PreparedTransaction`, from any producer."""
    api_key = v.END_TXN
    priority = PRIORITY_END
    key_type = KEY_TRANSACTION

    def __init__(self, prepared: PreparedTransaction, commit: bool, result: TxnResult, deadline_ms: int):
        super().__init__(prepared.transactional_id, result, deadline_ms=deadline_ms)
        self.prepared = prepared
        self.commit = commit

    def build(self):
        p = self.prepared
        return m.EndTxnRequest(transactional_id=p.transactional_id, producer_id=p.producer_id,
                               producer_epoch=p.epoch, committed=self.commit)

    def on_response(self, resp):
        code = resp.error_code
        if code in RETRY:
            return code
        what = f"complete_transaction({self.prepared!r}, commit={self.commit})"
        if code:
            self.result.fail(txn_error_for(code, what))
            return None
        self.result.succeed()
        return None
