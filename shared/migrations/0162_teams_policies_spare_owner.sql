-- The teams restriction applies to the API role only, never to the owner's rights (issue 30).
--
-- The restrictive api_teams policies (0155) are TO sds_api, and a policy applies to every member
-- of the role it names. The deployment's login role `sds` owns the database and is a member of
-- sds_api (it must be, to SET ROLE), and it is no superuser: so inside the SECURITY DEFINER
-- functions those policies ask (sds_request_team_ids and the others, running as `sds`), the
-- policy of team_members applied again and called sds_request_team_ids again, until "stack
-- depth limit exceeded": every request of a teams-only member in a team failed. The suite had
-- migrated as a superuser, whom row-level security never touches, so it never saw this (the
-- tests now provision their databases as deployed: testbed/database.py).
--
-- A caller is teams-only when the request said so (app.teams_only, set by the API from the
-- membership) AND it is acting as the API role: inside an owner's-rights function the current
-- user is the owner and the restriction is off, as the functions' own comments always meant
-- (they still answer for the request's own user and organisation only). A view read with its
-- owner's rights (org_quarantine) does not change current_user, so it stays restricted.
CREATE OR REPLACE FUNCTION sds_request_teams_only() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN current_user = 'sds_api'
   AND coalesce(current_setting('app.teams_only', true), '') = 'on';
