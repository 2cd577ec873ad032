/*
 * deploy/mosquitto/sds_retain.c: mosquitto plugin that keeps clients from storing retained
 * messages (issue 20 item 3). Built and installed by deploy/setup.sh; loaded by the `plugin`
 * line of deploy/mosquitto/mosquitto.conf.
 *
 * Why: a device may publish under its own subtree, and every retained publish stays in the
 * broker's memory and in its persistence file until cleared (250 topics of 2 MiB took the broker
 * from 59 to 508 MB and a 522 MB store rewritten every autosave). Nothing in the service reads
 * retained messages (the ingester subscribes with Retain Handling 2), so the flag is stripped:
 * the message is delivered, ingested or quarantined like any other, and never kept. A device
 * that sets the flag by mistake loses nothing and needs no change.
 *
 * A retained publish with an empty payload still passes: it only deletes a retained message
 * (one kept from before this plugin) and stores nothing. The broker's own $SYS topics do not go
 * through this event and stay retained. How often the flag was stripped is logged, at most one
 * line a minute (docs/operations.md).
 */
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>

/* Seconds between two log lines about stripped flags: a device retrying in a loop must not
 * flood the broker log. */
#define LOG_EVERY_S 60

static mosquitto_plugin_id_t *plugin_id = NULL;
static unsigned long stripped_since_log = 0;
static unsigned long stripped_total = 0;
static time_t last_log = 0;

static int on_message(int event, void *event_data, void *userdata)
{
	struct mosquitto_evt_message *ed = event_data;
	const char *user;
	time_t now;

	(void)event;
	(void)userdata;
	if(!ed->retain || ed->payloadlen == 0){
		return MOSQ_ERR_SUCCESS;
	}
	ed->retain = false;
	stripped_since_log++;
	stripped_total++;
	now = time(NULL);
	if(now - last_log >= LOG_EVERY_S){
		user = mosquitto_client_username(ed->client);
		mosquitto_log_printf(MOSQ_LOG_NOTICE,
				"sds_retain: stripped the retain flag from %lu publish(es) (%lu since start), "
				"latest from user %s on %s", stripped_since_log, stripped_total,
				user ? user : "(none)", ed->topic);
		stripped_since_log = 0;
		last_log = now;
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
	(void)user_data;
	(void)opts;
	(void)opt_count;
	plugin_id = identifier;
	return mosquitto_callback_register(plugin_id, MOSQ_EVT_MESSAGE, on_message, NULL, NULL);
}

int mosquitto_plugin_cleanup(void *user_data, struct mosquitto_opt *opts, int opt_count)
{
	(void)user_data;
	(void)opts;
	(void)opt_count;
	return mosquitto_callback_unregister(plugin_id, MOSQ_EVT_MESSAGE, on_message, NULL);
}
