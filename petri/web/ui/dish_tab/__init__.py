"""The Dish tab: the tab itself, the dish inputs it shares with the Compare tab, and one event's live view.
"""
