"""The demo's knowledge base as data: topics, their passages and the queries with the grades
their author intended (`monitor/demo/build_data.py` turns it into the data files).

The product, "Acme Cloud Backup", and every passage and query were written for ragmon; nothing
is copied from a real product's documentation. Each topic groups 4-6 passages. A query names the
passages that answer it (grade 3 exactly, 2 partly); the other passages of its topic are on-topic
distractors (grade 1) unless the query says otherwise, and everything else is unrelated (0).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Topic:
    """Passages on one subject; queries map 1-based passage numbers (or `topic-n` ids) to grades."""

    segment: str
    name: str
    passages: tuple[str, ...]
    queries: tuple[tuple[str, dict[int | str, int]], ...] = field(default=())


TOPICS: tuple[Topic, ...] = (
    # ---------------------------------------------------------------- billing
    Topic(
        "billing",
        "plans",
        (
            "Acme Cloud Backup has three plans: Personal (1 TB for one user), Team (5 TB shared "
            "by up to 25 users) and Business (unlimited users, storage priced per terabyte).",
            "The Personal plan costs $8 per month or $80 per year. The Team plan costs $30 per "
            "month for the first 5 TB.",
            "Every plan includes file versioning, client-side encryption and restores from the "
            "web app. Only the Business plan adds single sign-on and audit logs.",
            "Nonprofit and education customers get a 30 percent discount on any plan after "
            "support verifies their organization.",
            "The free trial lasts 14 days, includes all Team features and needs no credit card. "
            "Trial data is deleted 30 days after the trial ends unless you subscribe.",
        ),
        (
            ("What does the Personal plan cost per month?", {2: 3}),
            ("Is there a discount for nonprofit or education customers?", {4: 3}),
            ("How long is the free trial and does it need a credit card?", {5: 3}),
            ("Which plan adds single sign-on and audit logs?", {3: 3, "sso-1": 2}),
        ),
    ),
    Topic(
        "billing",
        "invoices",
        (
            "To download an invoice as a PDF, open Billing > Invoices in the web app and click "
            "the download icon next to the invoice.",
            "Invoices are emailed to the billing contact on the first day of each billing cycle.",
            "To change the company name, address or VAT number printed on future invoices, edit "
            "Billing > Company details. Invoices already issued cannot be changed.",
            "To send invoices to a different email address, add a billing contact under Billing "
            "> Contacts. The account owner keeps receiving a copy.",
            "An invoice marked Unpaid switches to Paid a few minutes after a successful card "
            "charge; a bank transfer can take up to three business days to show.",
        ),
        (
            ("How do I download an invoice as a PDF?", {1: 3}),
            ("Can I change the company address on my invoices?", {3: 3}),
            ("How do I send invoices to a different email address?", {4: 3, 2: 2}),
            ("Why does my invoice still show Unpaid?", {5: 3}),
        ),
    ),
    Topic(
        "billing",
        "payment",
        (
            "Acme accepts Visa, Mastercard and American Express cards, and PayPal on the Personal "
            "plan. Business customers can also pay by bank transfer.",
            "To update your credit card, open Billing > Payment method, click Replace card and "
            "enter the new card details. The next charge uses the new card.",
            "When a card payment fails, we retry the charge after 3, 5 and 7 days and email the "
            "billing contact each time. After the last retry the account becomes read-only.",
            "A read-only account keeps all backups and allows restores, but new backups stop "
            "until the outstanding balance is paid.",
            "Prepaid cards are often declined by our payment processor with the code "
            "card_declined. Pay with a regular credit or debit card instead.",
        ),
        (
            ("How do I update my credit card?", {2: 3}),
            ("What happens when a card payment fails?", {3: 3, 4: 2}),
            ("Can I pay by bank transfer?", {1: 3}),
            ("Why was my prepaid card declined?", {5: 3}),
        ),
    ),
    Topic(
        "billing",
        "refunds",
        (
            "To cancel your subscription, open Billing > Subscription and click Cancel "
            "subscription. Backups keep running until the end of the paid period.",
            "Annual plans get a full refund within 30 days of purchase. After 30 days we refund "
            "the unused months of an annual plan on request.",
            "Monthly plans are not refunded for partial months; cancelling only stops the next "
            "renewal.",
            "What happens to backup data after you cancel: it is kept for 30 days after the "
            "subscription ends and then permanently deleted. Reactivate within that window to "
            "keep everything.",
            "To request a refund, contact support from the account owner's email and include "
            "the invoice number.",
        ),
        (
            ("How do I cancel my subscription?", {1: 3}),
            ("Can I get a refund on an annual plan?", {2: 3, 5: 2}),
            ("What happens to my backup data after I cancel?", {4: 3}),
        ),
    ),
    Topic(
        "billing",
        "plan-changes",
        (
            "To upgrade from Personal to Team, open Billing > Change plan and choose Team. The "
            "upgrade takes effect immediately and the price difference is prorated.",
            "A downgrade takes effect at the end of the current billing period. If your stored "
            "data exceeds the smaller plan's quota, the downgrade is blocked until you delete "
            "data.",
            "To switch from monthly to annual billing, choose Change plan, select Annual billing "
            "and confirm. The unused part of the month is credited.",
            "Proration credits appear as a negative line on the next invoice and never expire.",
        ),
        (
            ("How do I upgrade from Personal to Team?", {1: 3}),
            ("Why is my downgrade blocked?", {2: 3}),
            ("How do I switch from monthly to annual billing?", {3: 3}),
        ),
    ),
    Topic(
        "billing",
        "storage",
        (
            "Business storage is billed per terabyte, measured as the daily average over the "
            "billing month.",
            "At 90 percent of your storage quota, the account owner gets an email warning and "
            "the desktop app shows a yellow banner.",
            "When a Team account goes over its storage quota, new backups pause until you free "
            "space or buy an extra storage pack of 1 TB for $6 per month.",
            "Old file versions count toward your storage quota. Shortening version retention "
            "under Settings > Versions frees space at the next cleanup.",
            "The Storage page of the web app shows usage per device and per user, updated every "
            "hour.",
        ),
        (
            ("What happens when a Team account goes over its storage quota?", {3: 3}),
            ("How do I see storage usage per device?", {5: 3}),
            ("Do old file versions count toward my storage quota?", {4: 3}),
            ("How is Business storage billed?", {1: 3}),
        ),
    ),
    Topic(
        "billing",
        "taxes",
        (
            "Prices on the website exclude VAT. VAT is added at checkout for customers in the "
            "EU and the UK, based on the billing address.",
            "Business customers in the EU can enter a valid VAT ID under Billing > Company "
            "details to have the reverse charge applied, so no VAT is charged.",
            "US sales tax is charged in the states where Acme is registered; the rate depends "
            "on the ZIP code of the billing address.",
            "Tax-exempt organizations can email a tax exemption certificate to support. It "
            "applies to invoices issued after approval.",
        ),
        (
            ("How do I add my VAT ID for the reverse charge?", {2: 3}),
            ("Do prices include VAT?", {1: 3}),
            ("How do I get a tax exemption?", {4: 3}),
        ),
    ),
    # -------------------------------------------------------------- technical
    Topic(
        "technical",
        "install-windows",
        (
            "To install the desktop app on Windows, download AcmeBackupSetup.exe from the "
            "Downloads page, run it and sign in with your Acme account.",
            "The Windows app supports Windows 10 and Windows 11, 64-bit only, and needs 500 MB "
            "of free disk space.",
            "Installer error 0x80070643 means another installation is in progress. Wait for "
            "Windows Update to finish, then run the installer again.",
            "For a silent installation on many PCs, run AcmeBackupSetup.exe /quiet "
            "TOKEN=<deployment token>. Create the deployment token under Admin > Deployment.",
            "The Windows app starts with Windows and runs as a background service named "
            "AcmeBackupService.",
        ),
        (
            ("How do I install the desktop app on Windows?", {1: 3}),
            ("Installer error 0x80070643", {3: 3}),
            ("Silent installation on many PCs with a deployment token", {4: 3}),
            ("Which Windows versions are supported?", {2: 3}),
        ),
    ),
    Topic(
        "technical",
        "install-mac-linux",
        (
            "To install on macOS, open AcmeBackup.dmg, drag the app to Applications, then grant "
            "Full Disk Access in System Settings > Privacy & Security.",
            "Without Full Disk Access, macOS blocks the app from reading the Mail, Photos and "
            "Desktop folders, and those files are skipped.",
            "To install the Linux client on Ubuntu or Debian, run sudo apt install "
            "./acme-backup_amd64.deb, then acme-backup login.",
            "The Linux client is command-line only and runs as a systemd service. Check that "
            "the service is running with systemctl status acme-backup.",
            "Macs with Apple silicon or Intel processors running macOS 12 or later are supported.",
        ),
        (
            ("How do I grant Full Disk Access on macOS?", {1: 3}),
            ("How do I install the Linux client on Ubuntu?", {3: 3}),
            ("How do I check that the Linux client service is running?", {4: 3}),
            ("Are Apple silicon Macs supported?", {5: 3}),
        ),
    ),
    Topic(
        "technical",
        "sync-errors",
        (
            "Sync error E101 means a file was locked by another program while it was read. The "
            "app retries locked files every 15 minutes; close the program to back it up sooner.",
            "Sync error E204 means the file path is longer than 260 characters. Enable long "
            "paths in Windows or move the folder closer to the drive root.",
            "Sync error E309 means the storage quota of the account is full. New files are not "
            "uploaded until space is freed.",
            "Sync error E412 means the device clock differs from server time by more than 5 "
            "minutes. To fix it, turn on automatic time synchronization.",
            "Files with the status Waiting are queued for upload. This is normal during the "
            "first backup and is not an error.",
            "To see all sync errors, open the desktop app, click Activity and filter by Errors. "
            "Each row links to a help article.",
        ),
        (
            ("What does sync error E204 mean?", {2: 3}),
            ("Why are my files stuck in Waiting status?", {5: 3}),
            ("How do I see all sync errors in the desktop app?", {6: 3}),
            ("How do I fix error E412?", {4: 3}),
        ),
    ),
    Topic(
        "technical",
        "schedule",
        (
            "By default the desktop app backs up changed files continuously, within a few "
            "minutes of each change.",
            "To back up on a schedule instead, open Settings > Schedule and choose hourly, daily "
            "or a custom time window.",
            "To limit upload bandwidth, open Settings > Network and set a maximum upload speed "
            "in Mbit/s. The limit can apply during working hours only.",
            "Backups pause on metered connections and when the laptop battery is below 20 "
            "percent. Both rules can be turned off in Settings.",
            "The first backup of a large folder is slow and can take days. Files upload "
            "smallest first, so most files are protected early.",
        ),
        (
            ("How do I limit upload bandwidth?", {3: 3}),
            ("Why does my backup pause on battery?", {4: 3}),
            ("How do I back up on a daily schedule?", {2: 3}),
            ("Why is the first backup so slow?", {5: 3}),
        ),
    ),
    Topic(
        "technical",
        "restore",
        (
            "To restore a file, open the web app, browse to its folder, select the file and "
            "click Restore. It downloads to your computer.",
            "To restore an earlier version of a file, right-click the file in the web app, "
            "choose Versions and pick the version to restore.",
            "Deleted files stay in the Trash for 30 days on Personal and Team plans and 90 days "
            "on Business, then they are removed for good.",
            "To restore a whole computer, install the app on the new machine, sign in, choose "
            "Restore from another device and select the old computer.",
            "Restores larger than 500 GB can be shipped on an encrypted USB drive for a fee; "
            "order one under Restore > Ship a drive.",
        ),
        (
            ("How do I restore an earlier version of a file?", {2: 3}),
            ("How long do deleted files stay in the Trash?", {3: 3}),
            ("How do I restore a whole computer to a new machine?", {4: 3}),
            ("Can you ship my restore on a USB drive?", {5: 3}),
        ),
    ),
    Topic(
        "technical",
        "api-limits",
        (
            "The REST API allows 600 requests per minute per API key on Team plans and 3,000 "
            "requests per minute on Business plans.",
            "When a client exceeds the rate limit, the API answers HTTP 429 Too Many Requests "
            "with a Retry-After header giving the seconds to wait.",
            "The maximum file size for a single API upload is 5 GB. Larger files need the "
            "multipart upload endpoint with parts of 100 MB.",
            "Every API response carries the headers X-RateLimit-Remaining and X-RateLimit-Reset "
            "so that clients can check the remaining limit and slow down early.",
            "The API version is part of the URL path, for example /v2/files. Version 1 is "
            "retired on 30 June.",
        ),
        (
            ("How many API requests per minute are allowed?", {1: 3}),
            ("What does HTTP 429 Too Many Requests mean?", {2: 3}),
            ("What is the maximum file size for an API upload?", {3: 3}),
            ("How do I check my remaining rate limit?", {4: 3}),
        ),
    ),
    Topic(
        "technical",
        "api-keys",
        (
            "To create an API key, open Admin > API keys, click New key, name it and copy "
            "the key. It is shown only once.",
            "Send the API key in the Authorization header as Bearer <key> on every request. "
            "Keys in the URL query string are rejected.",
            "API keys do not expire, but an admin can revoke a key at any time under Admin > "
            "API keys. A revoked key fails with HTTP 401.",
            "Scopes limit what a key can do: files:read, files:write, devices:read and admin. A "
            "key with only files:read cannot delete anything.",
        ),
        (
            ("How do I create an API key?", {1: 3}),
            ("Why does my API key fail with HTTP 401?", {3: 3}),
            ("How do I send the API key in the Authorization header?", {2: 3}),
            ("What scopes can an API key have?", {4: 3}),
        ),
    ),
    Topic(
        "technical",
        "security",
        (
            "Files are encrypted on your device with AES-256 before upload, then stay encrypted "
            "in transit with TLS 1.3 and at rest in our data centers.",
            "With a private encryption key only you can decrypt your backups. If you lose the "
            "private key, Acme cannot recover your data.",
            "To set a private encryption key, open Settings > Security > Private key before the "
            "first backup. It cannot be added later without uploading everything again.",
            "Acme data centers are in Frankfurt, Dublin and Virginia. You choose the region "
            "when the account is created and it cannot be changed later.",
            "Acme Cloud Backup holds a SOC 2 Type II report and an ISO 27001 certificate; "
            "customers can request them under NDA.",
        ),
        (
            ("Are my files encrypted before upload?", {1: 3}),
            ("What happens if I lose my private key?", {2: 3}),
            ("Can I change my data center region?", {4: 3}),
            ("Do you have SOC 2 or ISO 27001?", {5: 3}),
        ),
    ),
    Topic(
        "technical",
        "mobile",
        (
            "The iOS and Android apps back up photos and videos from your phone automatically "
            "when Camera Upload is turned on.",
            "Camera Upload waits for Wi-Fi by default. To allow cellular data, open Settings > "
            "Camera Upload > Use cellular data.",
            "On iPhone, background uploads only run while the phone is charging and iOS allows "
            "Background App Refresh for the app.",
            "The mobile apps can browse and restore files from any computer in your account, "
            "but they cannot back up other folders on the phone.",
        ),
        (
            ("How do I back up photos from my phone automatically?", {1: 3}),
            ("Can Camera Upload use cellular data?", {2: 3}),
            ("Why are iPhone background uploads not running?", {3: 3}),
        ),
    ),
    Topic(
        "technical",
        "network",
        (
            "Firewalls must allow outbound HTTPS on port 443 to *.acme-backup.example for the "
            "desktop app; no inbound ports are needed.",
            "To configure a proxy, open Settings > Network > Proxy and enter the proxy address "
            "and port. The app also reads the system proxy settings.",
            "A proxy that inspects TLS traffic needs its root certificate in the operating "
            "system's certificate store, or uploads fail with error E530.",
            "The app opens at most four parallel upload connections; lowering the number under "
            "Settings > Network helps on slow routers.",
        ),
        (
            ("Which firewall ports does the desktop app need?", {1: 3}),
            ("How do I configure a proxy?", {2: 3}),
            ("Uploads fail with error E530 behind a TLS inspection proxy", {3: 3}),
        ),
    ),
    # ---------------------------------------------------------------- account
    Topic(
        "account",
        "sso",
        (
            "Single sign-on (SSO) with SAML 2.0 is available on Business plans and works with "
            "Okta, Microsoft Entra ID, Google Workspace and OneLogin.",
            "To set up SAML SSO, open Admin > Security > SSO, copy the ACS URL and entity ID "
            "into your identity provider, then upload the provider's metadata XML.",
            "With Enforce SSO turned on, users can no longer sign in with a password; admins "
            "keep a password login for emergencies.",
            "SCIM provisioning creates and deactivates Acme users automatically when they are "
            "added to or removed from your identity provider.",
            "The SSO error NameID mismatch means the email address sent by the identity "
            "provider differs from the user's Acme login email.",
        ),
        (
            ("How do I set up SAML SSO?", {2: 3}),
            ("Does SSO work with Okta?", {1: 3}),
            ("How do I provision users automatically with SCIM?", {4: 3}),
            ("What does the SSO error NameID mismatch mean?", {5: 3}),
        ),
    ),
    Topic(
        "account",
        "two-factor",
        (
            "To turn on two-factor authentication, open Account > Security, click Enable 2FA "
            "and scan the QR code with an authenticator app.",
            "Save the ten recovery codes shown when you enable 2FA. Each code signs you in once "
            "if you lose your phone.",
            "If you lost your phone and your recovery codes, an admin can reset your two-factor "
            "authentication. On Personal plans, support resets 2FA after verifying your ID.",
            "Admins of Team and Business accounts can require two-factor authentication for all "
            "users under Admin > Security.",
            "Security keys such as YubiKey are supported as a second factor through WebAuthn.",
        ),
        (
            ("How do I turn on two-factor authentication?", {1: 3}),
            ("I lost my phone and recovery codes, how do I reset 2FA?", {3: 3, 2: 2}),
            ("Can admins require two-factor authentication for all users?", {4: 3}),
            ("Are YubiKey security keys supported?", {5: 3}),
        ),
    ),
    Topic(
        "account",
        "password",
        (
            "To reset your password, click Forgot password on the sign-in page and follow the "
            "link we email you. The link is valid for one hour.",
            "Passwords need at least 12 characters. Changing your password signs out all other "
            "sessions.",
            "After ten failed sign-in attempts the account is locked for 15 minutes to stop "
            "password guessing.",
            "To change the email address you sign in with, open Account > Profile, enter the "
            "new email and confirm the link sent to it.",
        ),
        (
            ("How do I reset my password?", {1: 3}),
            ("Why is my account locked after failed sign-in attempts?", {3: 3}),
            ("How do I change my sign-in email address?", {4: 3}),
        ),
    ),
    Topic(
        "account",
        "users",
        (
            "To invite a user to your team, open Admin > Users, click Invite and enter their "
            "email. The invitation is valid for 7 days.",
            "Acme has three roles: Owner (billing and everything else), the Admin role (users, "
            "devices and settings) and Member (their own devices and files).",
            "To transfer account ownership, the current owner opens Admin > Users, chooses "
            "another admin and clicks Make owner.",
            "When you remove a user, their backups are kept for 30 days so that an admin can "
            "restore them or transfer the files to another user.",
            "Admins can restore the files of any member but cannot read files protected by a "
            "private encryption key.",
        ),
        (
            ("How do I invite a user to my team?", {1: 3}),
            ("How do I transfer account ownership to another admin?", {3: 3}),
            ("What happens to backups when I remove a user?", {4: 3}),
            ("What can the Admin role do?", {2: 3, 5: 2}),
        ),
    ),
    Topic(
        "account",
        "deletion",
        (
            "To delete your Acme account, the owner opens Account > Delete account. All backups "
            "are erased within 30 days and this cannot be undone.",
            "To export all your backup data before leaving, use Restore > Download everything, "
            "which creates zip archives of up to 50 GB each.",
            "To request a copy of the personal data we hold about you under GDPR, email "
            "privacy@acme-backup.example. We answer within 30 days.",
            "Acme signs a data processing agreement (DPA) with Business customers; download the "
            "agreement under Admin > Legal.",
        ),
        (
            ("How do I delete my account?", {1: 3}),
            ("How do I export all my backup data?", {2: 3}),
            ("Where can I download the data processing agreement?", {4: 3}),
            ("How do I request my personal data under GDPR?", {3: 3}),
        ),
    ),
    Topic(
        "account",
        "audit",
        (
            "Audit logs are kept for one year and record sign-ins, restores, setting changes "
            "and user changes. Admins find them under Admin > Audit log.",
            "Audit logs can be exported as CSV or streamed to a SIEM through the webhook "
            "integration.",
            "Alerts email the admins when a device stops backing up for 7 days; change the "
            "number of days under Admin > Alerts.",
            "The Activity report summarizes the last backup time, size and errors of each "
            "device and can be emailed weekly.",
        ),
        (
            ("How long are audit logs kept?", {1: 3}),
            ("Can I export audit logs to a SIEM?", {2: 3}),
            ("How do I get alerts when a device stops backing up?", {3: 3}),
        ),
    ),
    Topic(
        "account",
        "devices",
        (
            "To remove an old computer from your account, open Devices, select it and click "
            "Remove device. Its backups are deleted after 30 days.",
            "Personal and Team plans back up unlimited devices; Business plans count only "
            "storage, never devices.",
            "To rename a device, open Devices, click the device name and type a new one. The "
            "name is only a label and does not change the backups.",
            "To move a backup to a new computer and keep the file history, choose Adopt backup "
            "when you sign in on the new computer.",
        ),
        (
            ("How do I remove an old computer from my account?", {1: 3}),
            ("How many devices can I back up?", {2: 3}),
            (
                "How do I move my backup to a new computer and keep file history?",
                {4: 3, "restore-4": 1},
            ),
        ),
    ),
)
