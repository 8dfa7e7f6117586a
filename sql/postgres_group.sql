-- A group's shared results store on PostgreSQL: every member reads every campaign,
-- and writes only their own (docs/security.md). Applied by the store's owner role
-- (never a member) once the tables exist, with `python -m campaign_sql.group`, which
-- substitutes the group role for :group (a checked identifier) and runs this file in one
-- transaction; re-running it is harmless.
--
-- Who is a campaign's owner is decided by the database, not by the client: a trigger
-- writes the connecting role into campaign."user" on INSERT, so a member cannot register
-- a campaign in another's name, and row-level security lets a member change only rows of
-- campaigns whose "user" is their own role. Points, attempts and every row table follow
-- their campaign through their foreign keys.

GRANT USAGE ON SCHEMA public TO :group;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO :group;
GRANT INSERT, UPDATE ON campaign, point, attempt, rank_timing, iteration, profile, breakdown, progress TO :group;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO :group;
-- meta (the schema version) and the tables' shape stay the owner's: migrations are theirs.

CREATE OR REPLACE FUNCTION campaign_owner_is_writer() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW."user" := current_user;
  RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS campaign_owner ON campaign;
CREATE TRIGGER campaign_owner BEFORE INSERT ON campaign
  FOR EACH ROW EXECUTE FUNCTION campaign_owner_is_writer();

-- Ownership through the foreign keys: whether role `who` owns the campaign of a point or
-- attempt. SECURITY DEFINER (with a fixed search_path) so that the lookup is one index
-- probe each, not itself filtered; the policies pass their own current_user as `who`.
CREATE OR REPLACE FUNCTION campaign_owned_by(cid text, who text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
  SELECT EXISTS (SELECT 1 FROM campaign c WHERE c.id = cid AND c."user" = who)
$$;
CREATE OR REPLACE FUNCTION point_owned_by(pid integer, who text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
  SELECT EXISTS (SELECT 1 FROM point p JOIN campaign c ON c.id = p.campaign_id
                 WHERE p.id = pid AND c."user" = who)
$$;
CREATE OR REPLACE FUNCTION attempt_owned_by(aid integer, who text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
  SELECT EXISTS (SELECT 1 FROM attempt a JOIN point p ON p.id = a.point_id JOIN campaign c ON c.id = p.campaign_id
                 WHERE a.id = aid AND c."user" = who)
$$;
REVOKE ALL ON FUNCTION campaign_owned_by(text, text), point_owned_by(integer, text),
  attempt_owned_by(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION campaign_owned_by(text, text), point_owned_by(integer, text),
  attempt_owned_by(integer, text) TO :group;

ALTER TABLE campaign ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS group_reads ON campaign;
DROP POLICY IF EXISTS owner_inserts ON campaign;
DROP POLICY IF EXISTS owner_updates ON campaign;
CREATE POLICY group_reads ON campaign FOR SELECT TO :group USING (true);
CREATE POLICY owner_inserts ON campaign FOR INSERT TO :group WITH CHECK ("user" = current_user);
CREATE POLICY owner_updates ON campaign FOR UPDATE TO :group
  USING ("user" = current_user) WITH CHECK ("user" = current_user);

ALTER TABLE point ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS group_reads ON point;
DROP POLICY IF EXISTS owner_inserts ON point;
DROP POLICY IF EXISTS owner_updates ON point;
CREATE POLICY group_reads ON point FOR SELECT TO :group USING (true);
CREATE POLICY owner_inserts ON point FOR INSERT TO :group WITH CHECK (campaign_owned_by(campaign_id, current_user));
CREATE POLICY owner_updates ON point FOR UPDATE TO :group
  USING (campaign_owned_by(campaign_id, current_user)) WITH CHECK (campaign_owned_by(campaign_id, current_user));

ALTER TABLE attempt ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS group_reads ON attempt;
DROP POLICY IF EXISTS owner_inserts ON attempt;
DROP POLICY IF EXISTS owner_updates ON attempt;
CREATE POLICY group_reads ON attempt FOR SELECT TO :group USING (true);
CREATE POLICY owner_inserts ON attempt FOR INSERT TO :group WITH CHECK (point_owned_by(point_id, current_user));
CREATE POLICY owner_updates ON attempt FOR UPDATE TO :group
  USING (point_owned_by(point_id, current_user)) WITH CHECK (point_owned_by(point_id, current_user));

-- The row tables of an attempt (the same three policies each).
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['rank_timing', 'iteration', 'profile', 'breakdown', 'progress'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('DROP POLICY IF EXISTS group_reads ON %I', t);
    EXECUTE format('DROP POLICY IF EXISTS owner_inserts ON %I', t);
    EXECUTE format('DROP POLICY IF EXISTS owner_updates ON %I', t);
    EXECUTE format('CREATE POLICY group_reads ON %I FOR SELECT TO %I USING (true)', t, :'group');
    EXECUTE format('CREATE POLICY owner_inserts ON %I FOR INSERT TO %I WITH CHECK (attempt_owned_by(attempt_id, current_user))', t, :'group');
    EXECUTE format('CREATE POLICY owner_updates ON %I FOR UPDATE TO %I '
                   'USING (attempt_owned_by(attempt_id, current_user)) WITH CHECK (attempt_owned_by(attempt_id, current_user))', t, :'group');
  END LOOP;
END $$;
