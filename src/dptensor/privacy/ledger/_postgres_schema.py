"""The server ledger's tables in PostgreSQL, their grants, row-level policies and triggers.

Everything lives in the schema ``dptensor``, owned by the curator's role that installed it:

* ``dptensor.ledgers`` -- one row per data set: its unique ``id``, the budget, the relations, the
  metadata its checksum chain starts from (``fixed``), the analysts' role and the curator;
* ``dptensor.charges`` -- every charge, append-only, keyed by ``(ledger, id)`` with ``id``
  1, 2, ... and a unique idempotency ``token``; each row holds the chained SHA-256 checksum
  after it (``chain``) and, set by the server and not by the client, the database user that
  inserted it (``db_user``), its address (``client_addr``) and the server's time;
* ``dptensor.budget_changes`` -- every change of a budget (a curator's act), written by a trigger.

Who may do what. Analysts (members of a ledger's ``analyst_role``) get ``USAGE`` on the schema,
``SELECT`` on the ledgers and ``SELECT, INSERT`` on the charges, nothing else; row-level security
shows them only the ledgers of their role. Triggers refuse, for every user including the owner's
own role, ``UPDATE``, ``DELETE`` and ``TRUNCATE`` of charges, an inserted charge that is not the
next one, and any change of a ledger other than its budget or (before its first charge) its
relations by its curator; only a table's owner or a superuser can ``DROP`` it or disable a
trigger. The trigger functions run with ``search_path = pg_catalog, pg_temp``, so that no function
an analyst defines can stand in for one they call. A statement refused by a grant or trigger is an
error that PostgreSQL writes to its log
(with ``log_line_prefix`` showing ``%u``: the user), so an attempt is recorded there.
"""

from __future__ import annotations

#: The schema version written to ``dptensor.ledgers.format``; a newer one is refused.
SERVER_FORMAT = 1
#: Key of the advisory lock taken while installing the schema (any fixed 64-bit number).
INSTALL_LOCK = 0x6450544253514C31

INSTALL = (
    "CREATE SCHEMA IF NOT EXISTS dptensor",
    """CREATE TABLE dptensor.ledgers (
        dataset text PRIMARY KEY,
        id text NOT NULL UNIQUE,
        format integer NOT NULL,
        epsilon double precision NOT NULL,
        delta double precision NOT NULL,
        relations text NOT NULL,
        fixed text NOT NULL,
        analyst_role text NOT NULL,
        curator text NOT NULL DEFAULT current_user,
        created timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    """CREATE TABLE dptensor.charges (
        ledger text NOT NULL REFERENCES dptensor.ledgers (id),
        id bigint NOT NULL CHECK (id >= 1),
        token text NOT NULL UNIQUE,
        time text NOT NULL,
        host text NOT NULL,
        pid bigint NOT NULL,
        "user" text NOT NULL,
        argv text NOT NULL,
        caller text NOT NULL,
        description text NOT NULL,
        neighbouring text NOT NULL,
        epsilon double precision NOT NULL,
        delta double precision NOT NULL,
        mechanism text NOT NULL,
        n_releases bigint NOT NULL,
        event text NOT NULL,
        guarantee text NOT NULL,
        spent_after double precision NOT NULL,
        chain text NOT NULL,
        db_user text NOT NULL DEFAULT session_user,
        client_addr text,
        server_time timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (ledger, id)
    )""",
    """CREATE TABLE dptensor.budget_changes (
        ledger text NOT NULL REFERENCES dptensor.ledgers (id),
        time timestamptz NOT NULL DEFAULT clock_timestamp(),
        db_user text NOT NULL DEFAULT session_user,
        epsilon_before double precision NOT NULL,
        delta_before double precision NOT NULL,
        epsilon_after double precision NOT NULL,
        delta_after double precision NOT NULL,
        relations_before text NOT NULL,
        relations_after text NOT NULL
    )""",
    # ---- charges: append-only, the next id only, who inserted it set by the server
    """CREATE FUNCTION dptensor.refuse_change() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
    BEGIN
        RAISE EXCEPTION 'dptensor budget ledger: % of % refused for database user %: charges are append-only',
            TG_OP, TG_TABLE_NAME, session_user USING ERRCODE = 'insufficient_privilege';
    END $$""",
    """CREATE FUNCTION dptensor.check_charge() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
    DECLARE last bigint;
    BEGIN
        SELECT max(c.id) INTO last FROM dptensor.charges c WHERE c.ledger = NEW.ledger;
        IF NEW.id <> coalesce(last, 0) + 1 THEN
            RAISE EXCEPTION 'dptensor budget ledger: charge % is not the next one (%)', NEW.id,
                coalesce(last, 0) + 1 USING ERRCODE = 'unique_violation';
        END IF;
        NEW.db_user := session_user;
        NEW.client_addr := coalesce(host(inet_client_addr()), 'local socket');
        NEW.server_time := clock_timestamp();
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER charges_append_only BEFORE UPDATE OR DELETE ON dptensor.charges
        FOR EACH ROW EXECUTE FUNCTION dptensor.refuse_change()""",
    """CREATE TRIGGER charges_no_truncate BEFORE TRUNCATE ON dptensor.charges
        FOR EACH STATEMENT EXECUTE FUNCTION dptensor.refuse_change()""",
    """CREATE TRIGGER charges_next BEFORE INSERT ON dptensor.charges
        FOR EACH ROW EXECUTE FUNCTION dptensor.check_charge()""",
    # ---- ledgers: only the curator changes a budget (recorded); nothing else ever changes
    """CREATE FUNCTION dptensor.check_ledger_change() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            RAISE EXCEPTION 'dptensor budget ledger: a ledger is never deleted (database user %)',
                session_user USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF NOT pg_has_role(session_user, OLD.curator, 'MEMBER') THEN
            RAISE EXCEPTION 'dptensor budget ledger: only its curator % changes the budget of %, not %',
                OLD.curator, OLD.dataset, session_user USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF (NEW.dataset, NEW.id, NEW.format, NEW.fixed, NEW.analyst_role, NEW.curator, NEW.created)
           IS DISTINCT FROM
           (OLD.dataset, OLD.id, OLD.format, OLD.fixed, OLD.analyst_role, OLD.curator, OLD.created) THEN
            RAISE EXCEPTION 'dptensor budget ledger: only the budget of a ledger can change'
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF NEW.relations IS DISTINCT FROM OLD.relations AND (OLD.relations <> '[]'
           OR EXISTS (SELECT 1 FROM dptensor.charges c WHERE c.ledger = OLD.id)) THEN
            RAISE EXCEPTION 'dptensor budget ledger: the relations of a ledger are fixed'
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        INSERT INTO dptensor.budget_changes (ledger, epsilon_before, delta_before, epsilon_after,
            delta_after, relations_before, relations_after)
            VALUES (OLD.id, OLD.epsilon, OLD.delta, NEW.epsilon, NEW.delta, OLD.relations, NEW.relations);
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER ledgers_checked BEFORE UPDATE OR DELETE ON dptensor.ledgers
        FOR EACH ROW EXECUTE FUNCTION dptensor.check_ledger_change()""",
    """CREATE TRIGGER ledgers_no_truncate BEFORE TRUNCATE ON dptensor.ledgers
        FOR EACH STATEMENT EXECUTE FUNCTION dptensor.refuse_change()""",
    """CREATE TRIGGER budget_changes_append_only BEFORE UPDATE OR DELETE ON dptensor.budget_changes
        FOR EACH ROW EXECUTE FUNCTION dptensor.refuse_change()""",
    """CREATE TRIGGER budget_changes_no_truncate BEFORE TRUNCATE ON dptensor.budget_changes
        FOR EACH STATEMENT EXECUTE FUNCTION dptensor.refuse_change()""",
    # ---- row-level security: an analyst sees (and charges) the ledgers of their role only
    "ALTER TABLE dptensor.ledgers ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE dptensor.charges ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE dptensor.budget_changes ENABLE ROW LEVEL SECURITY",
    """CREATE POLICY analysts_read ON dptensor.ledgers FOR SELECT
        USING (pg_has_role(current_user, analyst_role, 'MEMBER'))""",
    """CREATE POLICY analysts_read ON dptensor.charges FOR SELECT
        USING (EXISTS (SELECT 1 FROM dptensor.ledgers l WHERE l.id = ledger))""",
    """CREATE POLICY analysts_charge ON dptensor.charges FOR INSERT
        WITH CHECK (EXISTS (SELECT 1 FROM dptensor.ledgers l WHERE l.id = ledger))""",
    """CREATE POLICY analysts_read ON dptensor.budget_changes FOR SELECT
        USING (EXISTS (SELECT 1 FROM dptensor.ledgers l WHERE l.id = ledger))""",
    "REVOKE ALL ON ALL TABLES IN SCHEMA dptensor FROM PUBLIC",
)

#: Grants to a ledger's analyst role (``{role}`` is a quoted identifier, composed by psycopg.sql).
GRANTS = (
    "GRANT USAGE ON SCHEMA dptensor TO {role}",
    "GRANT SELECT ON dptensor.ledgers, dptensor.budget_changes TO {role}",
    "GRANT SELECT, INSERT ON dptensor.charges TO {role}",
)
