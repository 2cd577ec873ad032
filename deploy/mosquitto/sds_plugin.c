/*
 * deploy/mosquitto/sds_plugin.c: the service's mosquitto plugin (issue 20). Built and installed
 * by deploy/setup.sh; loaded by the `plugin` line of deploy/mosquitto/mosquitto.conf. Two rules
 * the acl_file cannot express; everything else stays with the acl_file.
 *
 * 1. Only the ingester's accounts may subscribe (MOSQ_EVT_ACL_CHECK, MOSQ_ACL_SUBSCRIBE).
 *    mosquitto's acl_file passes every SUBSCRIBE (security_default.c: "FIXME - implement ACL
 *    subscription strings") and checks read access only at delivery. A device that subscribed
 *    to the shards' shared group `$share/<group>/sensors/#` therefore became a member of it, and
 *    the broker dropped that member's round-robin share of everyone's readings. No documented
 *    device topic needs a subscription (a device only publishes), so every SUBSCRIBE from a user
 *    other than `ingester` or `ingester-<digits>` (the names shared/accounts.py reserves for the
 *    ingester's broker accounts: RESERVED_DEVICE_NAMES) is refused: 0x87 Not authorized in an
 *    MQTT 5 SUBACK, 0x80 Failure in MQTT 3.1.1. The ingester's own subscriptions, publishes and
 *    deliveries, and UNSUBSCRIBE, are deferred to the acl_file, which keeps the read grants.
 *    One exception (issue 24): an organisation's alert-reader account `alerts-<organisation
 *    uuid>` (admin/alertreaders.py; shared/accounts.py reserves the names) may subscribe to
 *    its own organisation's alerts topic only: a filter equal to `alerts/<uuid>` or under
 *    `alerts/<uuid>/`, never `$share/...` or another organisation's. Its read grant is the
 *    acl_file's `pattern read alerts/#`; the subscription refusal here is what confines it.
 *
 *    Alert readers publish nothing (issue 30): the acl_file's `pattern write sensors/%u/#` is
 *    for every user, so an alert reader could publish under `sensors/alerts-<uuid>/`, where
 *    everything ends in the quarantine (604 junk messages of 2 MiB added 1.3 GB in 17 s). Every
 *    PUBLISH from an alert-reader account is refused here (MOSQ_ACL_WRITE): 0x87 Not authorized
 *    in an MQTT 5 PUBACK; an MQTT 3.1.1 client gets a plain PUBACK and the message is dropped
 *    (the protocol has no refusal), which costs a reader nothing it may do.
 *
 * 2. No client keeps retained messages on the broker (MOSQ_EVT_MESSAGE). A device may publish
 *    under its own subtree, and every retained publish stayed in the broker's memory and store
 *    until cleared (250 topics of 2 MiB took the broker from 59 to 508 MB and a 522 MB store
 *    rewritten every autosave). Nothing in the service reads retained messages (the ingester
 *    subscribes with Retain Handling 2), so the flag is stripped: the message is delivered,
 *    ingested or quarantined like any other, and never kept. A retained publish with an empty
 *    payload still passes: it only deletes a retained message and stores nothing. The broker's
 *    own $SYS topics do not go through this event and stay retained.
 *
 * Both are logged at most one line a minute each (a client retrying in a loop must not flood the
 * broker log; docs/operations.md). A refused shared filter is logged without its group, which
 * may be the shards' secret (after_share_group).
 */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>

/* Seconds between two log lines about the same rule. */
#define LOG_EVERY_S 60

/* The ingester's account names: "ingester" and "ingester-<digits>" (shared/accounts.py
 * RESERVED_DEVICE_NAMES, which keeps every device from having such a name). */
#define INGESTER "ingester"

/* An organisation's alert reader: "alerts-" and a UUID in its 36-character text form; it may
 * subscribe under "alerts/<uuid>" only (alerts.delivery publishes there). */
#define READER "alerts-"
#define ALERTS_ROOT "alerts/"
#define UUID_LEN 36

/* A shared subscription filter: "$share/<group>/<filter>". */
#define SHARE_PREFIX "$share/"

struct rate_log {
	unsigned long since_log;
	unsigned long total;
	time_t last_log;
};

static mosquitto_plugin_id_t *plugin_id = NULL;
static struct rate_log stripped = {0, 0, 0};
static struct rate_log refused = {0, 0, 0};
static struct rate_log refused_pub = {0, 0, 0};

/* Count one event; true when a log line is due (then the caller logs and the count restarts). */
static bool rate_log_due(struct rate_log *r)
{
	time_t now = time(NULL);

	r->since_log++;
	r->total++;
	if(now - r->last_log < LOG_EVERY_S){
		return false;
	}
	r->last_log = now;
	return true;
}

static bool is_ingester(const char *user)
{
	size_t n = strlen(INGESTER);
	const char *p;

	if(user == NULL || strncmp(user, INGESTER, n) != 0){
		return false;
	}
	if(user[n] == '\0'){
		return true;
	}
	if(user[n] != '-' || user[n + 1] == '\0'){
		return false;
	}
	for(p = user + n + 1; *p; p++){
		if(*p < '0' || *p > '9'){
			return false;
		}
	}
	return true;
}

/* The organisation UUID of an alert-reader account name, or NULL for any other name. */
static const char *reader_org(const char *user)
{
	size_t n = strlen(READER);
	size_t i;
	const char *org;

	if(user == NULL || strncmp(user, READER, n) != 0 || strlen(user) != n + UUID_LEN){
		return NULL;
	}
	org = user + n;
	for(i = 0; i < UUID_LEN; i++){
		char c = org[i];
		bool dash = (i == 8 || i == 13 || i == 18 || i == 23);
		if(dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))){
			return NULL;
		}
	}
	return org;
}

/* Whether `filter` lies in the organisation's alerts subtree: "alerts/<org>" or "alerts/<org>/...". */
static bool in_alerts_of(const char *org, const char *filter)
{
	size_t n = strlen(ALERTS_ROOT);

	if(filter == NULL || strncmp(filter, ALERTS_ROOT, n) != 0
			|| strncmp(filter + n, org, UUID_LEN) != 0){
		return false;
	}
	return filter[n + UUID_LEN] == '\0' || filter[n + UUID_LEN] == '/';
}

/* The part of a `$share/<group>/...` filter after its group ("/..."), or NULL for another
 * filter. The group may be the shards' secret (SDS_INGEST_SHARE_GROUP, ingest/shards.py): a
 * device that learned it must not have it written into the broker log as well, where anyone
 * who reads the log (or a log shipper) would learn it too (issue 30 item 6.6). So the refusal
 * line names a shared filter as "$share/(a share group)/..." and never the group. */
static const char *after_share_group(const char *filter)
{
	const char *slash;
	size_t n = strlen(SHARE_PREFIX);

	if(filter == NULL || strncmp(filter, SHARE_PREFIX, n) != 0){
		return NULL;
	}
	slash = strchr(filter + n, '/');
	return slash != NULL ? slash : "";
}

static int on_acl_check(int event, void *event_data, void *userdata)
{
	struct mosquitto_evt_acl_check *ed = event_data;
	const char *user;
	const char *org;
	const char *shared_rest;

	(void)event;
	(void)userdata;
	user = mosquitto_client_username(ed->client);
	if(ed->access == MOSQ_ACL_WRITE && reader_org(user) != NULL){
		if(rate_log_due(&refused_pub)){
			mosquitto_log_printf(MOSQ_LOG_NOTICE,
					"sds_plugin: refused %lu PUBLISH(es) (%lu since start): alert readers may not "
					"publish; latest from user %s to %s", refused_pub.since_log, refused_pub.total,
					user, ed->topic);
			refused_pub.since_log = 0;
		}
		return MOSQ_ERR_ACL_DENIED;
	}
	if(ed->access != MOSQ_ACL_SUBSCRIBE){
		return MOSQ_ERR_PLUGIN_DEFER;
	}
	if(is_ingester(user)){
		return MOSQ_ERR_PLUGIN_DEFER; /* the acl_file decides, as for everything else */
	}
	org = reader_org(user);
	if(org != NULL && in_alerts_of(org, ed->topic)){
		return MOSQ_ERR_PLUGIN_DEFER; /* its own alerts; the acl_file grants the read */
	}
	if(rate_log_due(&refused)){
		shared_rest = after_share_group(ed->topic);
		mosquitto_log_printf(MOSQ_LOG_NOTICE,
				"sds_plugin: refused %lu SUBSCRIBE filter(s) (%lu since start): only the ingester's "
				"accounts, and alert readers to their own alerts, may subscribe; latest from user %s to %s%s",
				refused.since_log, refused.total, user ? user : "(none)",
				shared_rest != NULL ? SHARE_PREFIX "(a share group)" : "",
				shared_rest != NULL ? shared_rest : (ed->topic ? ed->topic : "(none)"));
		refused.since_log = 0;
	}
	return MOSQ_ERR_ACL_DENIED;
}

static int on_message(int event, void *event_data, void *userdata)
{
	struct mosquitto_evt_message *ed = event_data;
	const char *user;

	(void)event;
	(void)userdata;
	if(!ed->retain || ed->payloadlen == 0){
		return MOSQ_ERR_SUCCESS;
	}
	ed->retain = false;
	if(rate_log_due(&stripped)){
		user = mosquitto_client_username(ed->client);
		mosquitto_log_printf(MOSQ_LOG_NOTICE,
				"sds_retain: stripped the retain flag from %lu publish(es) (%lu since start), "
				"latest from user %s on %s", stripped.since_log, stripped.total,
				user ? user : "(none)", ed->topic);
		stripped.since_log = 0;
	}
	return MOSQ_ERR_SUCCESS;
}

int mosquitto_plugin_version(int supported_version_count, const int *supported_versions)
{
	int i;

	for(i = 0; i < supported_version_count; i++){
		if(supported_versions[i] == 5){
			return 5;
		}
	}
	return -1;
}

int mosquitto_plugin_init(mosquitto_plugin_id_t *identifier, void **user_data,
		struct mosquitto_opt *opts, int opt_count)
{
	int rc;

	(void)user_data;
	(void)opts;
	(void)opt_count;
	plugin_id = identifier;
	rc = mosquitto_callback_register(plugin_id, MOSQ_EVT_MESSAGE, on_message, NULL, NULL);
	if(rc != MOSQ_ERR_SUCCESS){
		return rc;
	}
	/* Registered before the acl_file's own check (mosquitto initialises plugins first and
	 * calls ACL callbacks in registration order), so a refusal here is final and a deferral
	 * falls through to the acl_file. */
	return mosquitto_callback_register(plugin_id, MOSQ_EVT_ACL_CHECK, on_acl_check, NULL, NULL);
}

int mosquitto_plugin_cleanup(void *user_data, struct mosquitto_opt *opts, int opt_count)
{
	(void)user_data;
	(void)opts;
	(void)opt_count;
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_ACL_CHECK, on_acl_check, NULL);
	return mosquitto_callback_unregister(plugin_id, MOSQ_EVT_MESSAGE, on_message, NULL);
}
