"""ember.frontend: model importers."""
