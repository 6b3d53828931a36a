"""The classifier and the exception boundary, with real KafkaError objects."""

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from runtime import (
    AbortableKafkaError,
    ErrorClass,
    ExactlyError,
    FatalKafkaError,
    FencedError,
    KafkaClientError,
    RetriableKafkaError,
    call_retrying,
    classify,
    member_fenced,
    producer_mendable,
    records_refused,
    to_client_error,
    translate_kafka_errors,
)
from runtime.kafka_errors import CertificateRefusal, certificate_refusal
from tests.kafka_helpers import failing_call

RETRIABLE, ABORTABLE, FATAL = ErrorClass.RETRIABLE, ErrorClass.ABORTABLE, ErrorClass.FATAL

TRANSIENT_CODES = [
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.CONCURRENT_TRANSACTIONS,
    KafkaError._DESTROY_BROKER,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.KAFKA_STORAGE_ERROR,
    KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.THROTTLING_QUOTA_EXCEEDED,
    KafkaError.NOT_CONTROLLER,
    KafkaError.UNSTABLE_OFFSET_COMMIT,
]
FATAL_CODES = [
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError._UNSUPPORTED_FEATURE,
    KafkaError.UNSUPPORTED_VERSION,
    KafkaError.INVALID_TXN_STATE,
]
FENCING_CODES = [
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError._FENCED,
    KafkaError.FENCED_INSTANCE_ID,
]
UNFLAGGED = KafkaError._MSG_TIMED_OUT  # in no table: only its flags decide


def error(code: int, **flags: bool) -> KafkaError:
    return KafkaError(code, "from the test", **flags)


@pytest.mark.parametrize(
    ("kafka_error", "expected"),
    [
        # Rule 1: fatal() wins over every other flag and over the transient table.
        pytest.param(error(UNFLAGGED, fatal=True), FATAL, id="fatal-flag"),
        pytest.param(
            error(UNFLAGGED, fatal=True, retriable=True), FATAL, id="fatal-beats-retriable"
        ),
        pytest.param(
            error(UNFLAGGED, fatal=True, txn_requires_abort=True), FATAL, id="fatal-beats-abortable"
        ),
        pytest.param(error(KafkaError._TRANSPORT, fatal=True), FATAL, id="fatal-beats-transient"),
        # Rule 1: a fencing code is fatal whatever the flags say.
        pytest.param(
            error(KafkaError.PRODUCER_FENCED, txn_requires_abort=True),
            FATAL,
            id="fenced-beats-abortable",
        ),
        pytest.param(
            error(KafkaError.INVALID_PRODUCER_EPOCH, retriable=True),
            FATAL,
            id="fenced-beats-retriable",
        ),
        # Rule 2: abortable wins over retriable and over the transient table.
        pytest.param(error(UNFLAGGED, txn_requires_abort=True), ABORTABLE, id="abortable-flag"),
        pytest.param(
            error(UNFLAGGED, txn_requires_abort=True, retriable=True),
            ABORTABLE,
            id="abortable-beats-retriable",
        ),
        pytest.param(
            error(KafkaError.CONCURRENT_TRANSACTIONS, txn_requires_abort=True),
            ABORTABLE,
            id="abortable-beats-transient",
        ),
        # Rule 3: librdkafka's retriable flag.
        pytest.param(error(UNFLAGGED, retriable=True), RETRIABLE, id="retriable-flag"),
        # Rule 5: what nobody flagged and no table names is fatal.
        pytest.param(error(UNFLAGGED), FATAL, id="unflagged-unknown"),
        pytest.param(error(KafkaError.UNKNOWN), FATAL, id="unknown-code"),
        pytest.param(error(123456), FATAL, id="code-librdkafka-does-not-know"),
    ],
)
def test_precedence_of_rules(kafka_error, expected):
    assert classify(kafka_error) is expected


@pytest.mark.parametrize("code", TRANSIENT_CODES)
def test_transient_codes_without_flags_are_retriable(code):
    assert classify(error(code)) is RETRIABLE


@pytest.mark.parametrize("code", FATAL_CODES)
def test_auth_unsupported_and_broken_transaction_state_are_fatal(code):
    assert classify(error(code)) is FATAL
    assert type(to_client_error(error(code))) is FatalKafkaError


@pytest.mark.parametrize("code", FENCING_CODES)
def test_fencing_codes_become_fenced_error(code):
    assert classify(error(code)) is FATAL
    assert isinstance(to_client_error(error(code)), FencedError)


def test_a_transactions_offsets_refused_for_our_own_old_member_id_abort_the_transaction():
    # librdkafka's TxnOffsetCommit handler makes FENCED_INSTANCE_ID the transaction's abortable
    # error: the offsets carried the member id our consumer had before it rejoined.
    refused = error(KafkaError.FENCED_INSTANCE_ID, txn_requires_abort=True)
    assert classify(refused) is ABORTABLE
    assert type(to_client_error(refused)) is AbortableKafkaError
    # From the consumer itself (its heartbeat or join), it is a twin: fenced.
    assert isinstance(
        to_client_error(error(KafkaError.FENCED_INSTANCE_ID, fatal=True)), FencedError
    )


@pytest.mark.parametrize(
    ("kafka_error", "expected_type"),
    [
        (error(KafkaError.NOT_COORDINATOR), RetriableKafkaError),
        (error(UNFLAGGED, txn_requires_abort=True), AbortableKafkaError),
        (error(UNFLAGGED), FatalKafkaError),
        (error(KafkaError._FENCED, fatal=True), FencedError),
    ],
)
def test_translate_raises_ours_from_the_cause(kafka_error, expected_type):
    cause = KafkaException(kafka_error)
    with pytest.raises(expected_type) as caught, translate_kafka_errors("commit_transaction"):
        raise cause
    raised = caught.value
    assert type(raised) is expected_type
    assert raised.kafka_error is kafka_error
    assert raised.__cause__ is cause
    assert str(raised) == f"commit_transaction: {kafka_error.name()}: from the test"


def test_tree_has_one_root():
    for leaf in (RetriableKafkaError, AbortableKafkaError, FatalKafkaError, FencedError):
        assert issubclass(leaf, KafkaClientError)
        assert issubclass(leaf, ExactlyError)
    assert issubclass(FencedError, FatalKafkaError)


def test_kafka_exception_without_kafka_error_is_fatal():
    with pytest.raises(FatalKafkaError) as caught, translate_kafka_errors("poll"):
        raise KafkaException("something odd")
    assert caught.value.kafka_error.code() == KafkaError.UNKNOWN
    assert "something odd" in str(caught.value)


def test_other_exceptions_pass_untouched():
    with pytest.raises(ValueError, match="not ours"), translate_kafka_errors("produce"):
        raise ValueError("not ours")


def test_message_is_one_line():
    raised = to_client_error(KafkaError(KafkaError._FAIL, "first\nsecond\n"), "flush")
    assert str(raised) == "flush: _FAIL: first second"


# librdkafka's own errors, not built by hand.

_SILENT = logging.Logger("test.silent")
_SILENT.disabled = True


def test_real_transport_failure_is_retriable_though_librdkafka_does_not_flag_it():
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "logger": _SILENT})
    with pytest.raises(RetriableKafkaError) as caught, translate_kafka_errors("list_topics"):
        producer.list_topics(timeout=0.1)
    kafka_error = caught.value.kafka_error
    assert kafka_error.code() == KafkaError._TRANSPORT
    assert not kafka_error.retriable()


def test_real_misuse_of_the_transactional_api_is_fatal():
    producer = Producer({"logger": _SILENT})  # no transactional.id
    with pytest.raises(FatalKafkaError) as caught, translate_kafka_errors("begin_transaction"):
        producer.begin_transaction()
    assert caught.value.kafka_error.code() == KafkaError._NOT_CONFIGURED


def test_call_retrying_retries_retriable_errors_until_success():
    loading = KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    call, calls = failing_call([loading, loading])
    seen = []
    assert call_retrying(call, deadline_s=10, backoff_s=0, on_retry=seen.append) == "done"
    assert len(calls) == 3
    assert [e.code() for e in seen] == [KafkaError.COORDINATOR_LOAD_IN_PROGRESS] * 2


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),  # fatal
        KafkaError(KafkaError.UNKNOWN, txn_requires_abort=True),  # abortable
    ],
)
def test_call_retrying_raises_other_errors_at_once(error):
    call, calls = failing_call([error])
    with pytest.raises(KafkaException) as raised:
        call_retrying(call, deadline_s=10, backoff_s=0)
    assert raised.value.args[0] is error
    assert len(calls) == 1


def test_call_retrying_gives_up_after_its_deadline():
    call, calls = failing_call([KafkaError(KafkaError._TIMED_OUT)] * 1000)
    with pytest.raises(KafkaException):
        call_retrying(call, deadline_s=0.05, backoff_s=0.01)
    assert 2 <= len(calls) < 1000


def test_a_consumer_fenced_as_a_static_member_is_told_from_other_errors():
    fenced = KafkaError(KafkaError.FENCED_INSTANCE_ID).str()
    # How librdkafka's consumer reports it: _FATAL, the original only in the text.
    assert member_fenced(
        KafkaError(KafkaError._FATAL, f"Fatal error: {fenced}: Fatal consumer error: {fenced}")
    )
    assert not member_fenced(KafkaError(KafkaError._FATAL, "Fatal error: Broker: Gap"))
    # A transaction's offsets refused for the member: the same event, seen by the producer.
    assert member_fenced(KafkaError(KafkaError.FENCED_INSTANCE_ID, fenced, txn_requires_abort=True))
    assert not member_fenced(KafkaError(KafkaError.FENCED_INSTANCE_ID, fenced, fatal=True))


@pytest.mark.parametrize(
    ("error", "mendable"),
    [
        # The one seen in a SIGTERM roll of a three-node target (librdkafka 2.16).
        (KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "desync", fatal=True), True),
        (KafkaError(KafkaError.INVALID_TXN_STATE, fatal=True), True),
        # Another instance owns the id: a new producer would fence the live twin.
        (KafkaError(KafkaError.PRODUCER_FENCED, fatal=True), False),
        (KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal=True), False),
        (KafkaError(KafkaError.UNSUPPORTED_VERSION, fatal=True), False),
        (KafkaError(KafkaError._FATAL, "cause unknown", fatal=True), False),
        # Not fatal: the abort path handles it with the producer it has.
        (KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, txn_requires_abort=True), False),
    ],
)
def test_a_new_producer_mends_only_a_fatal_error_of_its_own_state(error, mendable):
    assert producer_mendable(error) is mendable


@pytest.mark.parametrize(
    ("error", "refused"),
    [
        # Kafka 4.3.1's broker, our certificate from a CA it does not trust (TLS 1.3).
        (
            KafkaError(
                KafkaError._TRANSPORT,
                "ssl://127.0.0.1:24155/bootstrap: Receive failed: error:0A000416:SSL routines::"
                "ssl/tls alert certificate unknown: SSL alert number 46 (after 0ms in state "
                "APIVERSION_QUERY)",
            ),
            CertificateRefusal.CLIENT,
        ),
        # OpenSSL's words over TLS 1.2, and for no certificate at all.
        (
            KafkaError(
                KafkaError._SSL,
                "ssl://10.0.0.5:9093/1: SSL handshake failed: error:14094412:SSL routines:"
                "ssl3_read_bytes:sslv3 alert bad certificate: SSL alert number 42",
            ),
            CertificateRefusal.CLIENT,
        ),
        (
            KafkaError(
                KafkaError._TRANSPORT,
                "ssl://10.0.0.5:9093/1: Receive failed: error:0A00045C:SSL routines::tlsv13 "
                "alert certificate required: SSL alert number 116",
            ),
            CertificateRefusal.CLIENT,
        ),
        (
            KafkaError(
                KafkaError._SSL,
                "ssl://127.0.0.1:31236/bootstrap: SSL handshake failed: error:0A000086:SSL "
                "routines::certificate verify failed: broker certificate could not be verified",
            ),
            CertificateRefusal.BROKER,
        ),
        # A broker out of reach, and a text about certificates under another code.
        (
            KafkaError(
                KafkaError._TRANSPORT,
                "127.0.0.1:29312/2: Connect to ipv4#127.0.0.1:29312 failed: Connection refused",
            ),
            None,
        ),
        (KafkaError(KafkaError._AUTHENTICATION, "alert certificate unknown"), None),
    ],
    ids=["unknown-ca", "tls12-bad", "none-sent", "broker-unverified", "refused", "other-code"],
)
def test_a_refused_certificate_is_fatal_and_says_whose(error, refused):
    assert certificate_refusal(error) is refused
    if refused is not None:
        assert classify(error) is FATAL
    elif error.code() == KafkaError._TRANSPORT:
        assert classify(error) is RETRIABLE


# librdkafka 2.16's words for a transaction's records refused (rdkafka_request.c).
REFUSED_TEXT = (
    "ProduceRequest for flow.orders-v2 [7] with 1 message(s) failed: Broker: Message size too "
    "large (broker 1 PID{Id:3000,Epoch:0}, base seq 0): current transaction must be aborted"
)


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_TIMESTAMP,
        KafkaError.RECORD_LIST_TOO_LARGE,
    ],
)
def test_records_a_broker_refuses_for_good_name_their_topic_partition(code):
    refused = KafkaError(code, REFUSED_TEXT, txn_requires_abort=True)
    assert classify(refused) is ABORTABLE
    assert records_refused(refused) == ("flow.orders-v2", 7)


@pytest.mark.parametrize(
    "refused",
    [
        # What an abort and a retry may mend: a leader moving, a batch timed out.
        KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, REFUSED_TEXT, txn_requires_abort=True),
        KafkaError(KafkaError._MSG_TIMED_OUT, REFUSED_TEXT, txn_requires_abort=True),
        # Refused by the producer itself, before any transaction held it.
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large"),
        # The transaction's error without the partition in its words.
        KafkaError(
            KafkaError.MSG_SIZE_TOO_LARGE, "Message size too large", txn_requires_abort=True
        ),
    ],
)
def test_what_a_retry_may_mend_or_names_no_partition_is_not_records_refused(refused):
    assert records_refused(refused) is None
