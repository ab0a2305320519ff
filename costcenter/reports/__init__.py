"""Weekly and monthly e-mailed cost reports (app label ``reports``).

Modules: ``periods`` (the report's local-time period and when it is due), ``content`` (every
figure of a report, read through the same selectors as the API), ``images`` (the dashboard's
plotly figures as PNGs), ``mail`` (the MIME message), ``delivery`` (exactly-once sending),
``views`` (settings page, browser preview, one-click unsubscribe).
"""
