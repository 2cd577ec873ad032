"""`sds user invite|reset-link`: invitation and password-reset links for the operator (the same
rules as the API's, people/links.py; docs/auth.md "Invitations and password reset"). The link is
printed; an invitation is also mailed when SMTP is configured (SDS_SMTP_HOST), through the
durable outbox that the deliverer sends (shared/mailbox.py)."""

from __future__ import annotations

import click

from admin.context import Context, pass_ctx
from people import accounts, links, members, roles
from shared import audit, mail


@click.command("invite")
@click.argument("email")
@click.option("--org", "org_name", required=True, help="Organisation name or id.")
@click.option("--role", required=True, type=click.Choice(roles.ROLES))
@click.option("--teams-only", is_flag=True, help="Sees only their teams' devices and locations.")
@pass_ctx
def user_invite(obj: Context, email: str, org_name: str, role: str, teams_only: bool) -> None:
    """Invite EMAIL into an organisation with ROLE: prints the one-time link (and mails it when
    SMTP is configured)."""
    mailed = mail.configured(obj.settings)
    with obj.conn() as conn:
        org = accounts.org_id(conn, org_name)
        issued = links.invite(conn, obj.settings, org=org, email=email, role=role,
                              teams_only=teams_only, actor=audit.OPERATOR, by_owner=True)
        if mailed:  # printed too, so using it proves nothing of the email
            links.queue_mail(conn, obj.settings, issued, purpose="invite",
                             org_name=members.fetch_org(conn, org)[0]["name"], role=role,
                             mailed_only=False)
    if mailed:
        click.echo(f"queued for mail to {email.strip()} (the deliverer sends it)")
    click.echo(f"invitation {issued.id} for {email.strip()} as {role}, until "
               f"{issued.expires:%Y-%m-%d %H:%M} UTC:")
    click.echo(issued.url)


@click.command("reset-link")
@click.argument("email")
@pass_ctx
def user_reset_link(obj: Context, email: str) -> None:
    """Print a one-time password-reset link for the user EMAIL (accepting it sets a new
    password and ends their bearer tokens)."""
    with obj.conn() as conn:
        user = accounts.user_id(conn, email)
        issued = links.reset_link(conn, obj.settings, org=members.org_of(conn, user), user=user,
                                  actor=audit.OPERATOR, by_owner=True)
    click.echo(f"password-reset link for {email}, until {issued.expires:%Y-%m-%d %H:%M} UTC:")
    click.echo(issued.url)
