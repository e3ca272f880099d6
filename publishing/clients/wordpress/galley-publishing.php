<?php
/**
 * Plugin Name: Galley Publishing
 * Description: Galley's target protocol (docs/target-protocol.md) inside WordPress's REST API: each operation key is applied at most once, revisions are fenced, every write (publication or retraction) is one database transaction.
 * Version:     4
 * Requires PHP: 7.4
 * License:     GPL-2.0-or-later (it runs inside WordPress)
 *
 * A must-use plugin: copy (or link) this one file into wp-content/mu-plugins/. It needs no
 * activation and no settings; its three tables (publications, briefs, retractions) are created
 * on first use, and a newer version adds its own to a site's existing ones.
 *
 * WHY. Core WordPress has no idempotency keys (a repeated POST /wp/v2/posts makes a second post,
 * Idempotency-Key is ignored), no conditional update and no atomic create. Galley retries every
 * publish until it knows the outcome, so it needs a target that makes retries harmless.
 *
 * WHAT IT GUARANTEES (routes under /wp-json/galley/v1/, see the route list below):
 *
 *  1. Exactly once per operation key. POST /galley/v1/publications applies a key at most once,
 *     however many times and however concurrently it is sent: the key is a UNIQUE column and the
 *     whole application runs under row locks in one transaction. A repeat with the same key and
 *     the same body answers 200 with the first receipt; the same key with another payload hash
 *     (or another brief or revision) answers 422 {"error":"idempotency_mismatch"} and changes
 *     nothing. Keys are compared byte for byte (binary, no-pad collation). A duplicate that
 *     arrives while its key is being applied waits for that transaction and then answers 200 (it
 *     never needs the protocol's 409 in_progress, docs/target-protocol.md#publish).
 *  2. One brief is one post. The first revision of a brief creates a published post; every newer
 *     revision updates that same post (its slug, hence its permalink, stays). Galley's identity
 *     is kept on the post as meta: galley_brief_id, galley_revision, galley_payload_hash,
 *     galley_operation_key (visible in the core REST API, read-only there).
 *  3. Revision fence. A revision not above the brief's stored revision answers
 *     409 {"error":"stale_revision","current_revision":M} and changes nothing, so a request
 *     delayed in the network can never replace a newer revision (docs/invariants.md#i4).
 *  4. All or nothing. The post write, its meta, the publication row and the brief row are one
 *     InnoDB transaction (autocommit off, START TRANSACTION ... COMMIT). Any error, including a
 *     database error WordPress itself swallowed during wp_insert_post, rolls everything back and
 *     answers 500: an error answer leaves no post and no publication behind. Deadlocks and
 *     duplicate-key races are retried internally; a lock wait that runs out answers 503 with
 *     Retry-After.
 *  5. Verified content. payload_hash must be the sha256 of the canonical JSON of the payload
 *     (keys sorted, separators "," and ":", UTF-8, non-ASCII and "/" unescaped: Python's
 *     json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)), or the
 *     request is refused with 400. The payload is a story: "title" (the headline) and "body"
 *     (Markdown) strings, and optionally "standfirst", "byline", "section" (strings) and "tags"
 *     (a list of strings); no other field.
 *  6. Byte-exact round trip. The post's raw title, content and excerpt are what Galley sent
 *     byte for byte: the headline, "rendered"."content_html" (the body as Galley rendered and
 *     sanitized it) and the standfirst as the excerpt (none without one: WordPress then makes its
 *     own from the content, as for any post).
 *     A request without "rendered" (Galley before structured stories) writes the body as the
 *     content and no excerpt, as version 2 did. wp_insert_post unslashes its input (the plugin wp_slash()es it) and runs
 *     the save filters (trim on the title, entity conversion, kses). Galley publishes as an
 *     administrator, who has unfiltered_html, so kses does not apply; for such a user the plugin
 *     then writes the exact bytes over whatever the remaining filters changed. A publishing user
 *     WITHOUT unfiltered_html (e.g. an Author, or an administrator on multisite) gets WordPress's
 *     kses filtering, and the post may then differ from the payload: publish as an administrator.
 *
 * STORY. Besides title, content and excerpt: the tags are the post's tags (wp_set_post_tags,
 * replacing the post's own), the section its one category (created when the site has none of
 * that name; no section: the site's default category), and the byline the post meta
 * galley_byline, which a the_content filter shows readers as <p class="galley-byline">By …</p>
 * above the post's text (post_content itself stays exactly what Galley sent). All of it is
 * written in the publication's transaction.
 *
 * AUTH. Every route needs a signed-in user with publish_posts (application passwords over the
 * REST API): 401 when not signed in (WordPress treats a wrong application password as that, or
 * refuses it with 401 itself), 403 when signed in without the capability. Updating a brief's post
 * also needs edit_post on it.
 *
 * ROUTES.
 *  POST /galley/v1/publications              body {"operation_key","brief_id","revision","payload_hash","payload","rendered"},
 *                                            header Idempotency-Key = operation_key
 *                                            201 first application, 200 replay; the receipt is
 *                                            {"id","operation_key","brief_id","revision","payload_hash","permalink","post_id"}
 *                                            optional "republish": true (see REPUBLISH below)
 *  GET  /galley/v1/publications?operation_key=K   200 receipt + "live" (below) + "retracted", "retracted_at"
 *                                            (RETRACTION below), or 404 {"error":"not_found"}
 *  GET  /galley/v1/publications/{id}         200 receipt + "live" + "retracted", "retracted_at" + "payload" (as stored)
 *                                            + "post" {"title","content","status"} (raw, as the post holds them now)
 *  POST /galley/v1/publications/{id}/retraction   body {"operation_key","brief_id","revision","reason"},
 *                                            header Idempotency-Key = operation_key (the retraction key)
 *                                            201 first application, 200 replay; the receipt is
 *                                            {"id","operation_key","revision","retracted":true,"retracted_at"}
 *  GET  /galley/v1/briefs/{brief_id}         200 {"brief_id","post_id","revision","permalink"}, or 404
 *                                            (WordPress decodes a pretty REST path only partly: a brief id
 *                                            with "%" in it is looked up as ?rest_route=/galley/v1/briefs/<id>)
 *  GET  /galley/v1/status                    200 {"plugin":"galley-publishing","version":"4","fence":true,"user":<login>}
 *                                            (version 2: "live" on lookups and read-backs, "republish";
 *                                            version 3: structured stories, "rendered"; version 4: retraction)
 * Errors on these routes are {"error": <kind>, "detail": <text>}.
 *
 * LIVE CONTENT (drift). The receipt's payload_hash is what Galley sent; "live" is what the brief's
 * post shows NOW, read from wp_posts at the time of the request, so that an edit in wp-admin (or
 * through the core REST API, or any plugin) is seen:
 *   "live": {"hash","title","body","excerpt","status","revision","modified_gmt"}
 * title, body and excerpt are the raw post_title, post_content and post_excerpt; status is
 * post_status; revision is the post's galley_revision meta. "hash" is, while the post's title,
 * content and excerpt are exactly what the publication wrote (their sha256 is kept in the hidden
 * meta _galley_written), the payload_hash of that publication: a post that shows exactly revision
 * N has live.hash == N's payload_hash and status "publish". Once any of them is edited, and for a
 * post written before version 3, "hash" is the sha256 of the live content in the payload's own
 * canonical form (rule 5): {"title": post_title, "body": post_content}, plus "excerpt":
 * post_excerpt when the post has one; any hash but the publication's, or another status, is drift.
 * (An edit of the tags, the category or the byline alone is not drift: they are shown, not
 * verified.) Every publication row of a brief reports
 * the brief's one post, so an older row shows the newer revision's content.
 *
 * REPUBLISH. The revision fence refuses a revision not above the current one, and the approved
 * revision's own key already holds its receipt (a replay changes nothing), so restoring a drifted
 * post needs its own operation key (Galley's form: republish:<brief>:revision-<N>:conflict-<id>, one
 * per drift it repairs) and "republish": true in the body. Such a write is accepted only for the
 * brief's CURRENT revision and only with the payload hash that revision was published with: it
 * writes that same content over the post again and can never introduce other content or an older
 * revision (409 stale_revision otherwise). Its key is reserved and replayed like any other.
 *
 * RETRACTION. POST /publications/{id}/retraction takes the brief's article down: its one post
 * leaves publication, to DRAFT, in one transaction with the retraction key's row (a UNIQUE column
 * of the retractions table, reserved under the brief's row lock like a publication's key).
 * Draft, not trash: WordPress empties its trash after EMPTY_TRASH_DAYS and trashing renames the
 * post's slug, while a draft keeps the post, its meta and its address for the newer revision
 * that may bring the brief back (and for the newsroom's record). Only the status changes; the
 * text stays byte for byte. A post already out of publication (a draft, or trashed at the site)
 * stays as it is; prior_status in the row says what it was.
 *  - id is a publication of the brief named in the body (404 unknown id, 400 another brief's).
 *  - The request is known by its hash: the sha256 of the canonical JSON (rule 5) of
 *    {"brief_id","publication_id","reason","revision"} (publication_id the id of the path, as a
 *    string). The same key with the same hash answers 200 with the first receipt; with another
 *    hash 422 {"error":"idempotency_mismatch"}, changing nothing. A duplicate that arrives while
 *    its key is being applied waits for it and answers 200 (no 409 in_progress, as for publishes).
 *  - The fence: a revision below the one the brief holds answers 409 stale_revision naming it
 *    (Galley decides about that newer revision); nothing is reserved. A revision above it (one
 *    the site never got) raises the brief's fence to it, so a late publish of it is refused.
 *  - Afterwards every publication row of the brief reports "retracted": true and "retracted_at"
 *    (ISO 8601 UTC, that of the brief's first retraction of the revision it holds); a reader asking
 *    for the post's address (its pretty permalink, which the read-back keeps reporting, or
 *    ?p=<id>) gets 410 Gone, never WordPress's redirect to a published post of a similar name.
 *    The fence refuses a publish of a revision not above the retracted one, and a republish of
 *    it; a newer revision publishes the same post again, at the same address ("retracted": false).
 *
 * LIMITS. A persistent object cache may briefly keep entries written by a transaction that was
 * rolled back; the plugin evicts the touched post's entries and the options cache after a
 * rollback. If the database connection drops mid-transaction, WordPress reconnects silently in
 * autocommit mode; the plugin notices the new connection before writing its own rows and answers
 * 500, but a post written by wp_insert_post on the new connection may remain (without a
 * publication row, so Galley's lookup by key still says "not applied").
 *
 * TEST FAULTS. Only when the constant GALLEY_PUBLISHING_TEST_FAULTS is defined as true (a test
 * harness's wp-config.php, never a real site): a payload title of exactly
 * "__galley_test_fail_after_insert__" throws right after the post is written, and a retraction
 * reason of exactly "__galley_test_fail_before_commit__" right before the retraction commits (post
 * taken down, key row written), to prove the rollback.
 */

defined( 'ABSPATH' ) || exit;

if ( defined( 'GALLEY_PUBLISHING_VERSION' ) ) {
	return; // Loaded twice (mu-plugins and plugins): the first copy serves.
}

define( 'GALLEY_PUBLISHING_VERSION', '4' );

/** A transient conflict (deadlock, duplicate-key race): the whole transaction may be tried again. */
class Galley_Publishing_Retry extends RuntimeException {
}

/** A lock wait ran out: the caller should come back later (503 + Retry-After). */
class Galley_Publishing_Busy extends RuntimeException {
}

/** A request the plugin refuses as such (4xx); the response is ready to send. */
class Galley_Publishing_Refusal extends RuntimeException {
	/** @var WP_REST_Response */
	public $response;

	public function __construct( WP_REST_Response $response ) {
		parent::__construct( 'refused' );
		$this->response = $response;
	}
}

final class Galley_Publishing {
	const REST_NAMESPACE   = 'galley/v1';
	const SCHEMA_VERSION   = '2'; // 2: the retractions table
	const SCHEMA_OPTION    = 'galley_publishing_schema';
	const TEST_FAIL_TITLE  = '__galley_test_fail_after_insert__';
	const TEST_FAIL_REASON = '__galley_test_fail_before_commit__';
	const MAX_KEY_CHARS    = 255;
	const MAX_TITLE_BYTES  = 65535; // wp_posts.post_title is TEXT
	const MAX_REVISION     = 2147483647;
	const MAX_ATTEMPTS     = 5;
	const LOCK_WAIT_SECONDS = 10;
	const META_KEYS        = array(
		'galley_brief_id'      => 'string',
		'galley_revision'      => 'integer',
		'galley_payload_hash'  => 'string',
		'galley_operation_key' => 'string',
		'galley_byline'        => 'string',
	);
	/** Hidden meta (a leading underscore): the sha256 of the title, content and excerpt as written. */
	const WRITTEN_META     = '_galley_written';
	const RENDERED_TEXTS   = array( 'title', 'excerpt', 'content_html', 'byline', 'section' );
	const STORY_TEXTS      = array( 'standfirst', 'byline', 'section' );

	public static function boot() {
		add_action( 'init', array( __CLASS__, 'register_meta' ) );
		add_action( 'rest_api_init', array( __CLASS__, 'register_routes' ) );
		add_filter( 'rest_request_before_callbacks', array( __CLASS__, 'anonymous_is_401' ), 10, 3 );
		add_filter( 'rest_post_dispatch', array( __CLASS__, 'shape_errors' ), 10, 3 );
		add_filter( 'the_content', array( __CLASS__, 'show_byline' ) );
		add_action( 'wp', array( __CLASS__, 'gone_when_retracted' ) );
	}

	/** The byline above a Galley post's text, for readers (STORY above); escaped: it is text. */
	public static function show_byline( $content ) {
		$post = get_post();
		if ( ! $post || 'post' !== $post->post_type ) {
			return $content;
		}
		$byline = (string) get_post_meta( $post->ID, 'galley_byline', true );
		if ( '' === $byline ) {
			return $content;
		}
		return '<p class="galley-byline">By ' . esc_html( $byline ) . "</p>\n" . $content;
	}

	// --- registration ------------------------------------------------------------------------

	public static function register_meta() {
		foreach ( self::META_KEYS as $key => $type ) {
			register_post_meta(
				'post',
				$key,
				array(
					'type'          => $type,
					'single'        => true,
					'show_in_rest'  => true,
					'description'   => 'Written by the Galley publishing plugin.',
					// Readable in the REST API, never writable through it: only a publication changes it.
					'auth_callback' => '__return_false',
				)
			);
		}
	}

	public static function register_routes() {
		$permission = array( __CLASS__, 'permission' );
		register_rest_route(
			self::REST_NAMESPACE,
			'/publications',
			array(
				array(
					'methods'             => 'POST',
					'callback'            => array( __CLASS__, 'publish' ),
					'permission_callback' => $permission,
				),
				array(
					'methods'             => 'GET',
					'callback'            => array( __CLASS__, 'lookup' ),
					'permission_callback' => $permission,
				),
			)
		);
		register_rest_route(
			self::REST_NAMESPACE,
			'/publications/(?P<id>[^/]+)',
			array(
				'methods'             => 'GET',
				'callback'            => array( __CLASS__, 'read_back' ),
				'permission_callback' => $permission,
			)
		);
		register_rest_route(
			self::REST_NAMESPACE,
			'/publications/(?P<id>[^/]+)/retraction',
			array(
				'methods'             => 'POST',
				'callback'            => array( __CLASS__, 'retract' ),
				'permission_callback' => $permission,
			)
		);
		register_rest_route(
			self::REST_NAMESPACE,
			'/briefs/(?P<brief_id>.+)',
			array(
				'methods'             => 'GET',
				'callback'            => array( __CLASS__, 'brief' ),
				'permission_callback' => $permission,
			)
		);
		register_rest_route(
			self::REST_NAMESPACE,
			'/status',
			array(
				'methods'             => 'GET',
				'callback'            => array( __CLASS__, 'status' ),
				'permission_callback' => $permission,
			)
		);
	}

	public static function permission() {
		if ( ! is_user_logged_in() ) {
			return new WP_Error( 'unauthorized', 'Sign in with a WordPress user and an application password.', array( 'status' => 401 ) );
		}
		if ( ! current_user_can( 'publish_posts' ) ) {
			return new WP_Error( 'forbidden', 'This user may not publish posts (publish_posts).', array( 'status' => 403 ) );
		}
		return true;
	}

	private static function is_ours( WP_REST_Request $request ) {
		$route = '/' . ltrim( (string) $request->get_route(), '/' );
		return 0 === strpos( $route . '/', '/' . self::REST_NAMESPACE . '/' );
	}

	/** Anonymous callers get 401 on every Galley route, before any other answer (even a 400 for bad JSON). */
	public static function anonymous_is_401( $response, $handler, $request ) {
		if ( $request instanceof WP_REST_Request && self::is_ours( $request ) && ! is_user_logged_in() ) {
			return self::permission();
		}
		return $response;
	}

	/** WordPress's own errors on Galley routes (auth, bad JSON, no route) in Galley's error shape. */
	public static function shape_errors( $response, $server, $request ) {
		if ( ! ( $response instanceof WP_REST_Response ) || ! ( $request instanceof WP_REST_Request ) || ! self::is_ours( $request ) ) {
			return $response;
		}
		$status = $response->get_status();
		$data   = $response->get_data();
		if ( $status < 400 || ! is_array( $data ) || isset( $data['error'] ) || ! isset( $data['code'] ) ) {
			return $response;
		}
		$kinds = array(
			400 => 'invalid',
			401 => 'unauthorized',
			403 => 'forbidden',
			404 => 'not_found',
			500 => 'internal',
		);
		$response->set_data(
			array(
				'error'  => isset( $kinds[ $status ] ) ? $kinds[ $status ] : (string) $data['code'],
				'detail' => isset( $data['message'] ) ? (string) $data['message'] : (string) $data['code'],
				'code'   => (string) $data['code'],
			)
		);
		return $response;
	}

	// --- schema ------------------------------------------------------------------------------

	private static function publications_table() {
		global $wpdb;
		return $wpdb->prefix . 'galley_publications';
	}

	private static function briefs_table() {
		global $wpdb;
		return $wpdb->prefix . 'galley_briefs';
	}

	private static function retractions_table() {
		global $wpdb;
		return $wpdb->prefix . 'galley_retractions';
	}

	/** A binary collation that also compares trailing spaces: keys are equal only when their bytes are. */
	private static function key_collation() {
		global $wpdb;
		foreach ( array( 'utf8mb4_nopad_bin', 'utf8mb4_0900_bin', 'utf8mb4_bin' ) as $collation ) {
			$found = $wpdb->get_var( $wpdb->prepare( 'SHOW COLLATION WHERE Collation = %s', $collation ) );
			if ( $found ) {
				return $collation;
			}
		}
		return 'utf8mb4_bin';
	}

	/**
	 * CREATE TABLE IF NOT EXISTS, once per schema version; never inside a transaction (DDL commits).
	 * Every text column is utf8mb4: wpdb refuses (as "invalid data") non-ASCII text in a query on a
	 * table whose columns mix character sets.
	 */
	public static function ensure_schema() {
		global $wpdb;
		if ( get_option( self::SCHEMA_OPTION ) === self::SCHEMA_VERSION ) {
			return;
		}
		$key         = 'CHARACTER SET utf8mb4 COLLATE ' . self::key_collation();
		$charset     = 'DEFAULT CHARACTER SET utf8mb4';
		$publications = self::publications_table();
		$briefs      = self::briefs_table();
		$retractions = self::retractions_table();
		$statements  = array(
			"CREATE TABLE IF NOT EXISTS {$publications} (
				id bigint(20) unsigned NOT NULL AUTO_INCREMENT,
				operation_key varchar(255) {$key} NOT NULL,
				brief_id varchar(255) {$key} NOT NULL,
				revision int(10) unsigned NOT NULL,
				payload_hash char(64) {$key} NOT NULL,
				payload longtext CHARACTER SET utf8mb4 NOT NULL,
				post_id bigint(20) unsigned NOT NULL,
				created_gmt datetime NOT NULL,
				PRIMARY KEY  (id),
				UNIQUE KEY operation_key (operation_key),
				KEY brief_revision (brief_id, revision)
			) ENGINE=InnoDB {$charset}",
			"CREATE TABLE IF NOT EXISTS {$briefs} (
				brief_id varchar(255) {$key} NOT NULL,
				post_id bigint(20) unsigned NULL,
				revision int(10) unsigned NOT NULL DEFAULT 0,
				PRIMARY KEY  (brief_id)
			) ENGINE=InnoDB {$charset}",
			// One row per retraction key, written in the transaction that takes the post down.
			"CREATE TABLE IF NOT EXISTS {$retractions} (
				id bigint(20) unsigned NOT NULL AUTO_INCREMENT,
				operation_key varchar(255) {$key} NOT NULL,
				request_hash char(64) {$key} NOT NULL,
				publication_id bigint(20) unsigned NOT NULL,
				brief_id varchar(255) {$key} NOT NULL,
				revision int(10) unsigned NOT NULL,
				reason longtext CHARACTER SET utf8mb4 NOT NULL,
				post_id bigint(20) unsigned NULL,
				prior_status varchar(20) CHARACTER SET utf8mb4 NOT NULL,
				retracted_gmt datetime NOT NULL,
				PRIMARY KEY  (id),
				UNIQUE KEY operation_key (operation_key),
				KEY brief_revision (brief_id, revision)
			) ENGINE=InnoDB {$charset}",
		);
		foreach ( $statements as $sql ) {
			if ( false === $wpdb->query( $sql ) ) {
				throw new RuntimeException( 'Could not create the Galley tables: ' . $wpdb->last_error );
			}
		}
		update_option( self::SCHEMA_OPTION, self::SCHEMA_VERSION, true );
	}

	// --- answers -----------------------------------------------------------------------------

	private static function answer( $status, array $body, array $headers = array() ) {
		$response = new WP_REST_Response( $body, $status );
		foreach ( $headers as $name => $value ) {
			$response->header( $name, $value );
		}
		return $response;
	}

	private static function invalid( $detail ) {
		return self::answer( 400, array( 'error' => 'invalid', 'detail' => $detail ) );
	}

	private static function not_found( $detail ) {
		return self::answer( 404, array( 'error' => 'not_found', 'detail' => $detail ) );
	}

	private static function receipt( $row ) {
		return array(
			'id'            => (string) $row->id,
			'operation_key' => (string) $row->operation_key,
			'brief_id'      => (string) $row->brief_id,
			'revision'      => (int) $row->revision,
			'payload_hash'  => (string) $row->payload_hash,
			'permalink'     => self::permalink( (int) $row->post_id ),
			'post_id'       => (int) $row->post_id,
		);
	}

	/**
	 * The post's permalink. A draft's is the address it is published at, not WordPress's ?p=<id>
	 * for drafts: a retracted post keeps its address (it answers 410 Gone there, RETRACTION), and a
	 * newer revision brings it back at that same address.
	 */
	private static function permalink( $post_id ) {
		$post = get_post( $post_id );
		if ( ! $post ) {
			return '';
		}
		if ( 'draft' === $post->post_status && '' !== (string) $post->post_name ) {
			$post              = clone $post;
			$post->post_status = 'publish';
		}
		$permalink = get_permalink( $post );
		return $permalink ? $permalink : '';
	}

	/** The answer to a retraction, first time and replay alike (RETRACTION). */
	private static function retraction_receipt( $row ) {
		return array(
			'id'            => (string) $row->publication_id,
			'operation_key' => (string) $row->operation_key,
			'revision'      => (int) $row->revision,
			'retracted'     => true,
			'retracted_at'  => self::iso_time( $row->retracted_gmt ),
		);
	}

	private static function iso_time( $gmt ) {
		return str_replace( ' ', 'T', (string) $gmt ) . 'Z';
	}

	// --- validation --------------------------------------------------------------------------

	/** sha256 hex of the canonical JSON, as Python's json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False). */
	public static function payload_hash( array $payload ) {
		ksort( $payload, SORT_STRING );
		$flags = JSON_UNESCAPED_UNICODE | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_LINE_TERMINATORS | JSON_THROW_ON_ERROR;
		return hash( 'sha256', json_encode( $payload, $flags ) );
	}

	private static function is_key( $value ) {
		return is_string( $value ) && '' !== $value && mb_strlen( $value, 'UTF-8' ) <= self::MAX_KEY_CHARS;
	}

	/**
	 * The body's fields when it is a JSON object with none but the expected ones and a valid
	 * operation_key, brief_id and revision, which every write names; or a 400 response.
	 */
	private static function write_fields( WP_REST_Request $request, array $expected ) {
		$body = json_decode( (string) $request->get_body(), false, 64, JSON_BIGINT_AS_STRING );
		if ( ! ( $body instanceof stdClass ) ) {
			return self::invalid( 'The body must be a JSON object (' . json_last_error_msg() . ').' );
		}
		$fields  = get_object_vars( $body );
		$unknown = array_diff( array_keys( $fields ), $expected );
		if ( $unknown ) {
			return self::invalid( 'Unknown fields: ' . implode( ', ', $unknown ) . '.' );
		}
		foreach ( array( 'operation_key', 'brief_id' ) as $name ) {
			if ( ! isset( $fields[ $name ] ) || ! self::is_key( $fields[ $name ] ) ) {
				return self::invalid( "{$name} must be a non-empty string of at most " . self::MAX_KEY_CHARS . ' characters.' );
			}
		}
		$revision = isset( $fields['revision'] ) ? $fields['revision'] : null;
		if ( ! is_int( $revision ) || $revision < 1 || $revision > self::MAX_REVISION ) {
			return self::invalid( 'revision must be an integer from 1 to ' . self::MAX_REVISION . '.' );
		}
		return $fields;
	}

	/** A 400 response unless the Idempotency-Key header is the body's operation_key; else null. */
	private static function key_header_refusal( WP_REST_Request $request, array $fields ) {
		$key = $request->get_header( 'Idempotency-Key' );
		if ( null === $key || '' === $key ) {
			return self::invalid( 'The Idempotency-Key header is required.' );
		}
		if ( $key !== $fields['operation_key'] ) {
			return self::invalid( 'The Idempotency-Key header must equal operation_key.' );
		}
		return null;
	}

	/** The request body as a checked array, or a 400 response. */
	private static function parse_publication( WP_REST_Request $request ) {
		$fields = self::write_fields( $request, array( 'operation_key', 'brief_id', 'revision', 'payload_hash', 'payload', 'rendered', 'republish' ) );
		if ( $fields instanceof WP_REST_Response ) {
			return $fields;
		}
		$revision = $fields['revision'];
		$hash = isset( $fields['payload_hash'] ) ? $fields['payload_hash'] : null;
		if ( ! is_string( $hash ) || ! preg_match( '/\A[0-9a-f]{64}\z/', $hash ) ) {
			return self::invalid( 'payload_hash must be 64 lowercase hex characters (sha256).' );
		}
		$payload = isset( $fields['payload'] ) ? $fields['payload'] : null;
		if ( ! ( $payload instanceof stdClass ) ) {
			return self::invalid( 'payload must be a JSON object {"title", "body", ...}.' );
		}
		$payload = get_object_vars( $payload );
		ksort( $payload, SORT_STRING );
		$unknown = array_diff( array_keys( $payload ), array_merge( array( 'title', 'body', 'tags' ), self::STORY_TEXTS ) );
		if ( $unknown ) {
			return self::invalid( 'payload has unknown fields: ' . implode( ', ', $unknown ) . '; a story has title, standfirst, body, byline, section and tags.' );
		}
		foreach ( array( 'title', 'body' ) as $name ) {
			if ( ! isset( $payload[ $name ] ) ) {
				return self::invalid( "payload.{$name} is required." );
			}
		}
		foreach ( $payload as $name => $value ) {
			if ( 'tags' === $name ? ! self::is_string_list( $value ) : ! is_string( $value ) ) {
				return self::invalid( 'tags' === $name ? 'payload.tags must be a list of strings.' : "payload.{$name} must be a string." );
			}
		}
		$rendered = isset( $fields['rendered'] ) ? $fields['rendered'] : null;
		if ( null !== $rendered ) {
			if ( ! ( $rendered instanceof stdClass ) ) {
				return self::invalid( 'rendered must be a JSON object {"title", "excerpt", "content_html", "byline", "section", "tags"}.' );
			}
			$rendered = get_object_vars( $rendered );
			foreach ( self::RENDERED_TEXTS as $name ) {
				if ( ! isset( $rendered[ $name ] ) || ! is_string( $rendered[ $name ] ) ) {
					return self::invalid( "rendered.{$name} must be a string." );
				}
			}
			if ( ! isset( $rendered['tags'] ) || ! self::is_string_list( $rendered['tags'] ) ) {
				return self::invalid( 'rendered.tags must be a list of strings.' );
			}
			// The headline readers see is the hashed one.
			if ( $rendered['title'] !== $payload['title'] ) {
				return self::invalid( 'rendered.title must equal payload.title.' );
			}
		}
		if ( strlen( $payload['title'] ) > self::MAX_TITLE_BYTES ) {
			return self::invalid( 'payload.title must be at most ' . self::MAX_TITLE_BYTES . ' bytes of UTF-8.' );
		}
		$republish = isset( $fields['republish'] ) ? $fields['republish'] : false;
		if ( ! is_bool( $republish ) ) {
			return self::invalid( 'republish must be true or false.' );
		}
		$refusal = self::key_header_refusal( $request, $fields );
		if ( $refusal ) {
			return $refusal;
		}
		$actual = self::payload_hash( $payload );
		if ( $actual !== $hash ) {
			return self::invalid( "payload_hash does not match the payload (its canonical sha256 is {$actual})." );
		}
		return array(
			'operation_key' => $fields['operation_key'],
			'brief_id'      => $fields['brief_id'],
			'revision'      => $revision,
			'payload_hash'  => $hash,
			'payload'       => $payload,
			'rendered'      => $rendered,
			'republish'     => $republish,
		);
	}

	private static function is_string_list( $value ) {
		if ( ! is_array( $value ) || array_values( $value ) !== $value ) {
			return false;
		}
		foreach ( $value as $item ) {
			if ( ! is_string( $item ) ) {
				return false;
			}
		}
		return true;
	}

	// --- POST /publications ------------------------------------------------------------------

	public static function publish( WP_REST_Request $request ) {
		$publication = self::parse_publication( $request );
		if ( $publication instanceof WP_REST_Response ) {
			return $publication;
		}
		try {
			self::ensure_schema();
		} catch ( Throwable $error ) {
			return self::internal( $error );
		}
		return self::with_retries(
			function () use ( $publication ) {
				return self::apply( $publication );
			}
		);
	}

	/**
	 * Run one write transaction (a callable answering a response), again after a transient conflict
	 * (deadlock, duplicate-key race), at most MAX_ATTEMPTS times; every failure becomes its answer.
	 */
	private static function with_retries( callable $write ) {
		for ( $attempt = 1; ; $attempt++ ) {
			try {
				return $write();
			} catch ( Galley_Publishing_Refusal $refusal ) {
				return $refusal->response;
			} catch ( Galley_Publishing_Retry $retry ) {
				if ( $attempt >= self::MAX_ATTEMPTS ) {
					return self::busy( $retry->getMessage() );
				}
				usleep( wp_rand( 5000, 50000 ) * $attempt );
			} catch ( Galley_Publishing_Busy $busy ) {
				return self::busy( $busy->getMessage() );
			} catch ( Throwable $error ) {
				return self::internal( $error );
			}
		}
	}

	private static function busy( $detail ) {
		return self::answer( 503, array( 'error' => 'busy', 'detail' => $detail ), array( 'Retry-After' => '1' ) );
	}

	private static function internal( Throwable $error ) {
		error_log( 'galley-publishing: ' . get_class( $error ) . ': ' . $error->getMessage() ); // phpcs:ignore
		return self::answer(
			500,
			array(
				'error'  => 'internal',
				'detail' => 'The write failed and was rolled back: ' . $error->getMessage(),
			)
		);
	}

	/**
	 * One keyed write in one transaction (rules 1 and 4), for publications and retractions alike:
	 * the brief's row locked, so every write for the brief, hence every duplicate of a key, queues
	 * behind it; then the key, which under that lock shows a committed winner (READ COMMITTED):
	 * $replay($existing) answers it (200, or throws a 422 refusal); otherwise
	 * $apply($brief, &$touched_post) writes and answers 201, or throws. A new connection before our
	 * rows means WordPress reconnected mid-transaction: $apply checks same_connection($dbh).
	 * Everything rolls back on a throw; refusals thrown after a rollback are answers.
	 */
	private static function keyed_write( $table, $brief_id, $key, callable $replay, callable $apply ) {
		global $wpdb;
		$touched_post = 0;
		try {
			$dbh           = $wpdb->dbh;
			$errors_before = self::begin();
			$brief         = self::lock_brief( $brief_id );
			$existing      = self::row( $wpdb->prepare( "SELECT * FROM {$table} WHERE operation_key = %s FOR UPDATE", $key ) );
			if ( $existing ) {
				self::rollback( 0 );
				return $replay( $existing );
			}
			$response = $apply( $brief, $touched_post, $dbh );
			self::commit( $dbh, $errors_before );
			return $response;
		} catch ( Throwable $error ) {
			self::rollback( $touched_post );
			throw $error;
		}
	}

	/** The answer to a key applied to another request: 422, nothing changed (rule 1). */
	private static function mismatch( $detail ) {
		return new Galley_Publishing_Refusal( self::answer( 422, array( 'error' => 'idempotency_mismatch', 'detail' => $detail ) ) );
	}

	/** Run a prepared INSERT into $table; the row it inserted. */
	private static function inserted_row( $table, $insert ) {
		global $wpdb;
		if ( false === $wpdb->query( $insert ) ) {
			throw self::db_error();
		}
		$id  = (int) $wpdb->insert_id;
		$row = self::row( $wpdb->prepare( "SELECT * FROM {$table} WHERE id = %d", $id ) );
		if ( ! $row ) {
			throw new RuntimeException( "Row {$id} of {$table} is missing right after its insert." );
		}
		return $row;
	}

	/** A publication (keyed_write): 201 with the receipt, 200 replay, or a refusal. */
	private static function apply( array $p ) {
		$replay = function ( $existing ) use ( $p ) {
			$same = (string) $existing->operation_key === $p['operation_key']
				&& (string) $existing->payload_hash === $p['payload_hash']
				&& (string) $existing->brief_id === $p['brief_id']
				&& (int) $existing->revision === $p['revision'];
			if ( $same ) {
				return self::answer( 200, self::receipt( $existing ) );
			}
			throw self::mismatch( sprintf( 'This operation key was applied to brief %s revision %d with payload hash %s.', $existing->brief_id, (int) $existing->revision, $existing->payload_hash ) );
		};
		$write = function ( $brief, &$touched_post, $dbh ) use ( $p ) {
			global $wpdb;
			$publications = self::publications_table();

			// The fence: never an older (or the same) revision over a newer one. A republish
			// restores the current revision with the hash it was published with, nothing else, and
			// never a retracted one (RETRACTION: only a newer revision brings a brief back).
			$current  = (int) $brief->revision;
			$restores = $p['republish'] && $p['revision'] === $current
				&& $p['payload_hash'] === (string) $wpdb->get_var( $wpdb->prepare( "SELECT payload_hash FROM {$publications} WHERE brief_id = %s AND revision = %d ORDER BY id LIMIT 1", $p['brief_id'], $current ) )
				&& ! self::retraction_of( $p['brief_id'] );
			if ( $p['republish'] ? ! $restores : $p['revision'] <= $current ) {
				throw self::stale( $p['brief_id'], $current );
			}

			// The post: created for the brief's first publication, updated (same post, same slug) after.
			$post_id      = self::write_post( $p, $brief->post_id ? (int) $brief->post_id : 0 );
			$touched_post = $post_id;
			if ( self::TEST_FAIL_TITLE === $p['payload']['title'] && defined( 'GALLEY_PUBLISHING_TEST_FAULTS' ) && true === GALLEY_PUBLISHING_TEST_FAULTS ) {
				throw new RuntimeException( 'Test fault: failing after the post insert.' );
			}

			// Our rows.
			self::same_connection( $dbh );
			$row = self::inserted_row(
				$publications,
				$wpdb->prepare(
					"INSERT INTO {$publications} (operation_key, brief_id, revision, payload_hash, payload, post_id, created_gmt) VALUES (%s, %s, %d, %s, %s, %d, %s)",
					$p['operation_key'],
					$p['brief_id'],
					$p['revision'],
					$p['payload_hash'],
					self::canonical_payload( $p['payload'] ),
					$post_id,
					gmdate( 'Y-m-d H:i:s' )
				)
			);
			self::sql( $wpdb->prepare( 'UPDATE ' . self::briefs_table() . ' SET post_id = %d, revision = %d WHERE brief_id = %s', $post_id, $p['revision'], $p['brief_id'] ) );
			return self::answer( 201, self::receipt( $row ) );
		};
		return self::keyed_write( self::publications_table(), $p['brief_id'], $p['operation_key'], $replay, $write );
	}

	// --- POST /publications/{id}/retraction -------------------------------------------------------

	/** The retraction body as a checked array (with its request_hash), or a 400 response. */
	private static function parse_retraction( WP_REST_Request $request, $publication_id ) {
		$fields = self::write_fields( $request, array( 'operation_key', 'brief_id', 'revision', 'reason' ) );
		if ( $fields instanceof WP_REST_Response ) {
			return $fields;
		}
		if ( ! isset( $fields['reason'] ) || ! is_string( $fields['reason'] ) || '' === trim( $fields['reason'] ) ) {
			return self::invalid( 'reason must be a non-empty string.' );
		}
		$refusal = self::key_header_refusal( $request, $fields );
		if ( $refusal ) {
			return $refusal;
		}
		$request_hash = self::payload_hash(
			array(
				'brief_id'       => $fields['brief_id'],
				'publication_id' => $publication_id,
				'reason'         => $fields['reason'],
				'revision'       => $fields['revision'],
			)
		);
		return array(
			'operation_key'  => $fields['operation_key'],
			'brief_id'       => $fields['brief_id'],
			'revision'       => $fields['revision'],
			'reason'         => $fields['reason'],
			'publication_id' => $publication_id,
			'request_hash'   => $request_hash,
		);
	}

	public static function retract( WP_REST_Request $request ) {
		global $wpdb;
		$id = (string) $request->get_param( 'id' );
		$r  = self::parse_retraction( $request, $id );
		if ( $r instanceof WP_REST_Response ) {
			return $r;
		}
		$failed = self::ready();
		if ( $failed ) {
			return $failed;
		}
		// Publication rows are never updated or deleted: this read needs no lock.
		$table       = self::publications_table();
		$publication = preg_match( '/\A[1-9][0-9]{0,18}\z/', $id ) ? $wpdb->get_row( $wpdb->prepare( "SELECT * FROM {$table} WHERE id = %s", $id ) ) : null;
		if ( ! $publication ) {
			return self::not_found( 'No publication has this id.' );
		}
		if ( (string) $publication->brief_id !== $r['brief_id'] ) {
			return self::invalid( "Publication {$id} is of another brief than {$r['brief_id']}." );
		}
		return self::with_retries(
			function () use ( $r ) {
				return self::apply_retraction( $r );
			}
		);
	}

	/** A retraction (keyed_write, RETRACTION): 201 with the receipt, 200 replay, or a refusal. */
	private static function apply_retraction( array $r ) {
		$replay = function ( $existing ) use ( $r ) {
			if ( (string) $existing->operation_key === $r['operation_key'] && (string) $existing->request_hash === $r['request_hash'] ) {
				return self::answer( 200, self::retraction_receipt( $existing ) );
			}
			throw self::mismatch( sprintf( 'This retraction key was applied to publication %s of brief %s, revision %d, with request hash %s.', $existing->publication_id, $existing->brief_id, (int) $existing->revision, $existing->request_hash ) );
		};
		$write = function ( $brief, &$touched_post, $dbh ) use ( $r ) {
			global $wpdb;
			$retractions = self::retractions_table();

			// The fence: a newer revision than the one named is Galley's to decide about.
			$current = (int) $brief->revision;
			if ( $r['revision'] < $current ) {
				throw self::stale( $r['brief_id'], $current );
			}

			// The brief's one post leaves publication.
			$post_id      = $brief->post_id ? (int) $brief->post_id : 0;
			$prior_status = self::take_down( $post_id );
			$touched_post = $post_id;

			// Our rows. The fence rises to the retracted revision when the site held an older one,
			// so that a late publish of the retracted revision never brings it up.
			self::same_connection( $dbh );
			$row = self::inserted_row(
				$retractions,
				$wpdb->prepare(
					"INSERT INTO {$retractions} (operation_key, request_hash, publication_id, brief_id, revision, reason, post_id, prior_status, retracted_gmt) VALUES (%s, %s, %s, %s, %d, %s, %d, %s, %s)",
					$r['operation_key'],
					$r['request_hash'],
					$r['publication_id'],
					$r['brief_id'],
					$r['revision'],
					$r['reason'],
					$post_id,
					$prior_status,
					gmdate( 'Y-m-d H:i:s' )
				)
			);
			if ( $r['revision'] > $current ) {
				self::sql( $wpdb->prepare( 'UPDATE ' . self::briefs_table() . ' SET revision = %d WHERE brief_id = %s', $r['revision'], $r['brief_id'] ) );
			}
			if ( self::TEST_FAIL_REASON === $r['reason'] && defined( 'GALLEY_PUBLISHING_TEST_FAULTS' ) && true === GALLEY_PUBLISHING_TEST_FAULTS ) {
				throw new RuntimeException( 'Test fault: failing before the retraction commits.' );
			}
			return self::answer( 201, self::retraction_receipt( $row ) );
		};
		return self::keyed_write( self::retractions_table(), $r['brief_id'], $r['operation_key'], $replay, $write );
	}

	/**
	 * Move the post out of publication, to draft; its status before. A post already out of it
	 * (a draft, or trashed at the site) stays as it is, and a post deleted at the site leaves
	 * nothing to do (''). Only the status changes: the text stays byte for byte (rule 6).
	 */
	private static function take_down( $post_id ) {
		$post = $post_id ? get_post( $post_id ) : null;
		if ( ! $post || 'post' !== $post->post_type ) {
			return '';
		}
		$prior = (string) $post->post_status;
		if ( in_array( $prior, array( 'draft', 'trash' ), true ) ) {
			return $prior;
		}
		if ( ! current_user_can( 'edit_post', $post->ID ) ) {
			throw new Galley_Publishing_Refusal(
				self::answer( 403, array( 'error' => 'forbidden', 'detail' => "This user may not edit post {$post->ID}, the post of this brief." ) )
			);
		}
		$result = wp_update_post(
			array(
				'ID'          => $post->ID,
				'post_status' => 'draft',
			),
			true
		);
		if ( is_wp_error( $result ) || (int) $result !== (int) $post->ID ) {
			throw new RuntimeException( 'WordPress could not take the post down: ' . ( is_wp_error( $result ) ? $result->get_error_message() : 'no post' ) );
		}
		self::keep_exact_text( $post->ID, $post->post_title, $post->post_content, $post->post_excerpt );
		return $prior;
	}

	/**
	 * The retraction that holds the brief down now, or null: the first one of the revision the
	 * brief holds (a newer revision published since brings the brief back).
	 */
	private static function retraction_of( $brief_id ) {
		global $wpdb;
		$retractions = self::retractions_table();
		$briefs      = self::briefs_table();
		return self::row( $wpdb->prepare( "SELECT r.* FROM {$retractions} r JOIN {$briefs} b ON b.brief_id = r.brief_id WHERE r.brief_id = %s AND r.revision >= b.revision ORDER BY r.id LIMIT 1", $brief_id ) );
	}

	/**
	 * A reader asking for a retracted post's address gets 410 Gone, not WordPress's 404 (which a
	 * draft gets anyway) nor a redirect to a published post of a similar name.
	 */
	public static function gone_when_retracted() {
		global $wpdb;
		if ( ! is_404() ) {
			return;
		}
		$name = (string) get_query_var( 'name' );
		$id   = (int) get_query_var( 'p' );
		if ( '' === $name && 0 === $id ) {
			return;
		}
		$which    = '' !== $name ? $wpdb->prepare( 'p.post_name = %s', $name ) : $wpdb->prepare( 'p.ID = %d', $id );
		$brief_id = $wpdb->get_var( "SELECT m.meta_value FROM {$wpdb->posts} p JOIN {$wpdb->postmeta} m ON m.post_id = p.ID AND m.meta_key = 'galley_brief_id' WHERE {$which} AND p.post_type = 'post' AND p.post_status = 'draft' ORDER BY p.ID LIMIT 1" );
		if ( null === $brief_id || self::ready() || ! self::retraction_of( (string) $brief_id ) ) {
			return;
		}
		status_header( 410 );
		add_filter( 'do_redirect_guess_404_permalink', '__return_false' );
	}

	private static function canonical_payload( array $payload ) {
		ksort( $payload, SORT_STRING );
		return json_encode( $payload, JSON_UNESCAPED_UNICODE | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_LINE_TERMINATORS | JSON_THROW_ON_ERROR );
	}

	/** Create or update the brief's post with exactly the story as sent (rules 6, STORY); its id. */
	private static function write_post( array $p, $post_id ) {
		global $wpdb;
		$rendered = $p['rendered'];
		$title    = $p['payload']['title'];
		// Without "rendered" (an older Galley) the body is the content and there is no excerpt, as in version 2.
		$body    = $rendered ? $rendered['content_html'] : $p['payload']['body'];
		$excerpt = $rendered && isset( $p['payload']['standfirst'] ) ? $p['payload']['standfirst'] : '';
		$post    = $post_id ? get_post( $post_id ) : null;
		$data    = array(
			'post_title'   => $title,
			'post_content' => $body,
			'post_excerpt' => $excerpt, // also replaces one left from an edit in wp-admin
			'post_status'  => 'publish',
			'post_type'    => 'post',
		);
		if ( $post && 'post' === $post->post_type ) {
			if ( ! current_user_can( 'edit_post', $post->ID ) ) {
				throw new Galley_Publishing_Refusal(
					self::answer( 403, array( 'error' => 'forbidden', 'detail' => "This user may not edit post {$post->ID}, the post of this brief." ) )
				);
			}
			$data['ID'] = $post->ID;
			$result     = wp_update_post( wp_slash( $data ), true );
		} else {
			$data['post_author'] = get_current_user_id();
			$result              = wp_insert_post( wp_slash( $data ), true );
		}
		if ( is_wp_error( $result ) ) {
			throw new RuntimeException( 'WordPress could not write the post: ' . $result->get_error_message() );
		}
		$post_id = (int) $result;
		if ( $post_id <= 0 ) {
			throw new RuntimeException( 'WordPress wrote no post.' );
		}

		$stored = self::keep_exact_text( $post_id, $title, $body, $excerpt );
		self::write_story_terms( $p, $post_id );

		$meta = array(
			'galley_brief_id'      => $p['brief_id'],
			'galley_revision'      => $p['revision'],
			'galley_payload_hash'  => $p['payload_hash'],
			'galley_operation_key' => $p['operation_key'],
			'galley_byline'        => isset( $p['payload']['byline'] ) ? $p['payload']['byline'] : '',
			self::WRITTEN_META     => self::written_hash( $stored ),
		);
		foreach ( $meta as $key => $value ) {
			if ( false === update_post_meta( $post_id, $key, wp_slash( $value ) ) && (string) get_post_meta( $post_id, $key, true ) !== (string) $value ) {
				throw new RuntimeException( "Could not store the post meta {$key}." );
			}
		}
		return $post_id;
	}

	/**
	 * The post's title, content and excerpt as stored, made exactly these bytes again where the
	 * save filters (title trim, entity conversion) changed them: an unfiltered_html user's post
	 * holds exactly what was approved (rule 6).
	 */
	private static function keep_exact_text( $post_id, $title, $content, $excerpt ) {
		global $wpdb;
		$stored = self::row( $wpdb->prepare( "SELECT post_title, post_content, post_excerpt FROM {$wpdb->posts} WHERE ID = %d", $post_id ) );
		if ( ! $stored ) {
			throw new RuntimeException( "Post {$post_id} is missing right after it was written." );
		}
		$exact   = 'utf8mb4' === $wpdb->get_col_charset( $wpdb->posts, 'post_title' )
			&& 'utf8mb4' === $wpdb->get_col_charset( $wpdb->posts, 'post_content' )
			&& 'utf8mb4' === $wpdb->get_col_charset( $wpdb->posts, 'post_excerpt' );
		$changed = $stored->post_title !== $title || $stored->post_content !== $content || $stored->post_excerpt !== $excerpt;
		if ( $changed && $exact && current_user_can( 'unfiltered_html' ) ) {
			self::sql( $wpdb->prepare( "UPDATE {$wpdb->posts} SET post_title = %s, post_content = %s, post_excerpt = %s WHERE ID = %d", $title, $content, $excerpt, $post_id ) );
			clean_post_cache( $post_id );
			$stored = self::row( $wpdb->prepare( "SELECT post_title, post_content, post_excerpt FROM {$wpdb->posts} WHERE ID = %d", $post_id ) );
		}
		return $stored;
	}

	/** The sha256 of a post's title, content and excerpt (LIVE CONTENT above). */
	private static function written_hash( $post ) {
		return hash( 'sha256', serialize( array( (string) $post->post_title, (string) $post->post_content, (string) $post->post_excerpt ) ) );
	}

	/** The post's tags and its section's category (STORY above); a term WordPress cannot write is an error. */
	private static function write_story_terms( array $p, $post_id ) {
		$tags = isset( $p['payload']['tags'] ) ? $p['payload']['tags'] : array();
		// Tags are passed as a list: wp_set_post_tags splits a string at commas, and a tag has none.
		$result = wp_set_post_tags( $post_id, $tags, false );
		if ( is_wp_error( $result ) || false === $result ) {
			throw new RuntimeException( 'WordPress could not set the post\'s tags.' );
		}
		$section    = isset( $p['payload']['section'] ) ? $p['payload']['section'] : '';
		$categories = array();
		if ( '' !== $section ) {
			$term = term_exists( $section, 'category' );
			if ( ! $term ) {
				$term = wp_insert_term( $section, 'category' );
			}
			if ( is_wp_error( $term ) ) {
				throw new RuntimeException( 'WordPress could not make the category ' . $section . ': ' . $term->get_error_message() );
			}
			$categories[] = (int) $term['term_id'];
		}
		// An empty list gives the post the site's default category.
		if ( false === wp_set_post_categories( $post_id, $categories, false ) ) {
			throw new RuntimeException( 'WordPress could not set the post\'s category.' );
		}
	}

	// --- database helpers --------------------------------------------------------------------

	/**
	 * Open a write transaction; the count of database errors so far, for commit(). Autocommit off as
	 * well as START TRANSACTION: should InnoDB roll the transaction back on its own (a deadlock
	 * inside wp_insert_post that WordPress ignores), later statements still wait for our COMMIT or
	 * ROLLBACK instead of committing one by one. The caller rolls back on any throw.
	 */
	private static function begin() {
		global $wpdb, $EZSQL_ERROR;
		$wpdb->query( $wpdb->prepare( 'SET SESSION innodb_lock_wait_timeout = %d', self::LOCK_WAIT_SECONDS ) );
		self::sql( 'SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED' );
		self::sql( 'SET autocommit = 0' );
		$errors_before = is_array( $EZSQL_ERROR ) ? count( $EZSQL_ERROR ) : 0;
		self::sql( 'START TRANSACTION' );
		return $errors_before;
	}

	/** Commit, unless a database error occurred since begin() (even one WordPress swallowed) or the connection changed. */
	private static function commit( $dbh, $errors_before ) {
		global $EZSQL_ERROR;
		$errors_now = is_array( $EZSQL_ERROR ) ? count( $EZSQL_ERROR ) : 0;
		if ( $errors_now !== $errors_before ) {
			$last = $EZSQL_ERROR[ $errors_now - 1 ];
			throw new RuntimeException( 'A database error occurred during the write: ' . $last['error_str'] );
		}
		self::same_connection( $dbh );
		self::sql( 'COMMIT' );
		self::sql( 'SET autocommit = 1' );
	}

	/**
	 * The brief's row, created if absent, locked exclusively (INSERT ... ON DUPLICATE KEY UPDATE
	 * takes an X lock even on a duplicate): every write for this brief, hence every duplicate of a
	 * key, publication or retraction, queues here until the holder commits or rolls back.
	 */
	private static function lock_brief( $brief_id ) {
		global $wpdb;
		$briefs = self::briefs_table();
		self::sql( $wpdb->prepare( "INSERT INTO {$briefs} (brief_id, post_id, revision) VALUES (%s, NULL, 0) ON DUPLICATE KEY UPDATE brief_id = brief_id", $brief_id ) );
		$brief = self::row( $wpdb->prepare( "SELECT brief_id, post_id, revision FROM {$briefs} WHERE brief_id = %s FOR UPDATE", $brief_id ) );
		if ( ! $brief ) {
			throw new RuntimeException( 'The brief row vanished inside its own transaction.' );
		}
		return $brief;
	}

	/** The fence's refusal (rule 3): the brief holds revision $current. */
	private static function stale( $brief_id, $current ) {
		return new Galley_Publishing_Refusal(
			self::answer(
				409,
				array(
					'error'            => 'stale_revision',
					'current_revision' => $current,
					'detail'           => "Brief {$brief_id} already holds revision {$current}.",
				)
			)
		);
	}

	private static function sql( $sql ) {
		global $wpdb;
		$result = $wpdb->query( $sql );
		if ( false === $result ) {
			throw self::db_error();
		}
		return $result;
	}

	private static function row( $sql ) {
		global $wpdb;
		$row = $wpdb->get_row( $sql );
		if ( '' !== $wpdb->last_error ) {
			throw self::db_error();
		}
		return $row;
	}

	private static function db_error() {
		global $wpdb;
		$errno   = ( $wpdb->dbh instanceof mysqli ) ? mysqli_errno( $wpdb->dbh ) : 0;
		$message = "database error {$errno}: {$wpdb->last_error}";
		if ( 1213 === $errno || 1062 === $errno ) { // deadlock; a concurrent insert of the same key won
			return new Galley_Publishing_Retry( $message );
		}
		if ( 1205 === $errno ) { // lock wait timeout
			return new Galley_Publishing_Busy( $message );
		}
		return new RuntimeException( $message );
	}

	private static function same_connection( $dbh ) {
		global $wpdb;
		if ( $wpdb->dbh !== $dbh ) {
			throw new RuntimeException( 'The database connection was replaced during the transaction.' );
		}
	}

	private static function rollback( $touched_post ) {
		global $wpdb;
		$wpdb->query( 'ROLLBACK' );
		$wpdb->query( 'SET autocommit = 1' );
		// In-process and persistent caches may hold what the rolled-back transaction wrote.
		if ( $touched_post ) {
			clean_post_cache( $touched_post );
		}
		wp_cache_delete( 'alloptions', 'options' );
		wp_cache_delete( 'notoptions', 'options' );
		if ( function_exists( 'wp_cache_flush_runtime' ) ) {
			wp_cache_flush_runtime();
		}
	}

	// --- reads -------------------------------------------------------------------------------

	private static function ready() {
		try {
			self::ensure_schema();
			return null;
		} catch ( Throwable $error ) {
			return self::internal( $error );
		}
	}

	public static function lookup( WP_REST_Request $request ) {
		global $wpdb;
		$key = $request->get_query_params();
		$key = isset( $key['operation_key'] ) ? $key['operation_key'] : null;
		if ( ! is_string( $key ) || '' === $key ) {
			return self::invalid( 'The operation_key query parameter is required.' );
		}
		$failed = self::ready();
		if ( $failed ) {
			return $failed;
		}
		$table = self::publications_table();
		$row   = $wpdb->get_row( $wpdb->prepare( "SELECT * FROM {$table} WHERE operation_key = %s", $key ) );
		if ( ! $row || (string) $row->operation_key !== $key ) {
			return self::not_found( 'No publication has this operation key.' );
		}
		return self::answer( 200, self::observed( $row ) );
	}

	/**
	 * A publication as the site holds it now: its receipt, the post's live content and whether
	 * the brief is retracted (with when), which every publication row of the brief reports alike.
	 */
	private static function observed( $row ) {
		$body                 = self::receipt( $row );
		$body['live']         = self::live( (int) $row->post_id );
		$retraction           = self::retraction_of( (string) $row->brief_id );
		$body['retracted']    = null !== $retraction;
		$body['retracted_at'] = $retraction ? self::iso_time( $retraction->retracted_gmt ) : null;
		return $body;
	}

	public static function read_back( WP_REST_Request $request ) {
		global $wpdb;
		$id = (string) $request->get_param( 'id' );
		if ( ! preg_match( '/\A[1-9][0-9]{0,18}\z/', $id ) ) {
			return self::not_found( 'No publication has this id.' );
		}
		$failed = self::ready();
		if ( $failed ) {
			return $failed;
		}
		$table = self::publications_table();
		$row   = $wpdb->get_row( $wpdb->prepare( "SELECT * FROM {$table} WHERE id = %s", $id ) );
		if ( ! $row ) {
			return self::not_found( 'No publication has this id.' );
		}
		$body            = self::observed( $row );
		$body['payload'] = json_decode( $row->payload, true );
		$post            = get_post( (int) $row->post_id );
		$body['post']    = $post ? array(
			'title'   => $post->post_title,
			'content' => $post->post_content,
			'status'  => $post->post_status,
		) : null;
		return self::answer( 200, $body );
	}

	/** What the post shows now (LIVE CONTENT above), read from the table, past any object cache; null without a post. */
	private static function live( $post_id ) {
		global $wpdb;
		$post = $wpdb->get_row( $wpdb->prepare( "SELECT post_title, post_content, post_excerpt, post_status, post_modified_gmt FROM {$wpdb->posts} WHERE ID = %d", $post_id ) );
		if ( ! $post ) {
			return null;
		}
		// Read from the table, as the post is: the meta cache may predate a rolled-back write.
		$written = (string) $wpdb->get_var( $wpdb->prepare( "SELECT meta_value FROM {$wpdb->postmeta} WHERE post_id = %d AND meta_key = %s ORDER BY meta_id DESC LIMIT 1", $post_id, self::WRITTEN_META ) );
		if ( '' !== $written && hash_equals( $written, self::written_hash( $post ) ) ) {
			$hash = (string) $wpdb->get_var( $wpdb->prepare( "SELECT meta_value FROM {$wpdb->postmeta} WHERE post_id = %d AND meta_key = 'galley_payload_hash' ORDER BY meta_id DESC LIMIT 1", $post_id ) );
		} else {
			$content = array(
				'title' => (string) $post->post_title,
				'body'  => (string) $post->post_content,
			);
			if ( '' !== (string) $post->post_excerpt ) {
				$content['excerpt'] = (string) $post->post_excerpt;
			}
			try {
				$hash = self::payload_hash( $content );
			} catch ( JsonException $invalid ) {
				// Text that is not UTF-8 is no payload Galley wrote: a hash that matches none.
				$hash = hash( 'sha256', 'not-utf-8:' . serialize( $content ) );
			}
		}
		return array(
			'hash'         => $hash,
			'title'        => (string) $post->post_title,
			'body'         => (string) $post->post_content,
			'excerpt'      => (string) $post->post_excerpt,
			'status'       => (string) $post->post_status,
			'revision'     => (int) get_post_meta( $post_id, 'galley_revision', true ),
			'modified_gmt' => (string) $post->post_modified_gmt,
		);
	}

	public static function brief( WP_REST_Request $request ) {
		global $wpdb;
		$brief_id = (string) $request->get_param( 'brief_id' );
		$failed   = self::ready();
		if ( $failed ) {
			return $failed;
		}
		$table = self::briefs_table();
		$row   = $wpdb->get_row( $wpdb->prepare( "SELECT * FROM {$table} WHERE brief_id = %s", $brief_id ) );
		if ( ! $row || (string) $row->brief_id !== $brief_id || ! $row->post_id ) {
			return self::not_found( 'No publication exists for this brief.' );
		}
		$permalink = get_permalink( (int) $row->post_id );
		return self::answer(
			200,
			array(
				'brief_id'  => (string) $row->brief_id,
				'post_id'   => (int) $row->post_id,
				'revision'  => (int) $row->revision,
				'permalink' => $permalink ? $permalink : '',
			)
		);
	}

	public static function status() {
		$user = wp_get_current_user();
		return self::answer(
			200,
			array(
				'plugin'  => 'galley-publishing',
				'version' => GALLEY_PUBLISHING_VERSION,
				'fence'   => true,
				'user'    => $user->user_login,
			)
		);
	}
}

Galley_Publishing::boot();
