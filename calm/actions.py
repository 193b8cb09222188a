"""The 63 final actions of AirDialogue as class indices, for CALM's auxiliary action head.

A final action's status and flight (its name is copied from the dialogue,
not chosen) take one of 63 values on a 30-flight table:

  0..29   book   flight 1000..1029
  30..59  change flight 1000..1029
  60      cancel
  61      no_flight
  62      no_reservation

A head over these classes scores every action the agent could submit in one
softmax. The solver's expected action may list several flights tied at the
lowest price; each is correct, so `action_classes` returns all of them and a
loss can spread its target over the set.
"""

from __future__ import annotations

from data_pipelines.airdialogue import schema

NUM_FLIGHTS = 30  # Flights per official table, numbered from schema.FIRST_FLIGHT_NUMBER.
FLIGHT_STATUSES = ("book", "change")  # Statuses that name one flight.
FLIGHTLESS_STATUSES = ("cancel", "no_flight", "no_reservation")
NUM_ACTIONS = len(FLIGHT_STATUSES) * NUM_FLIGHTS + len(FLIGHTLESS_STATUSES)


def action_classes(action: schema.Action) -> tuple[int, ...]:
  """The class of every flight an action lists (all ties of an expected action), or its status.

  Raises ValueError for an action no class stands for: a booking or change
  without a flight or with a flight outside 1000..1029, or a flightless
  status that lists flights.
  """
  if action.status in FLIGHT_STATUSES:
    if not action.flights:
      raise ValueError(f"a {action.status} action needs a flight: {action}")
    offset = FLIGHT_STATUSES.index(action.status) * NUM_FLIGHTS
    classes = []
    for number in action.flights:
      position = number - schema.FIRST_FLIGHT_NUMBER
      if not 0 <= position < NUM_FLIGHTS:
        last = schema.FIRST_FLIGHT_NUMBER + NUM_FLIGHTS - 1
        raise ValueError(
            f"flight {number} of {action} is outside {schema.FIRST_FLIGHT_NUMBER}..{last}")
      classes.append(offset + position)
    return tuple(classes)
  if action.status in FLIGHTLESS_STATUSES:
    if action.flights:
      raise ValueError(f"a {action.status} action lists no flight: {action}")
    return (len(FLIGHT_STATUSES) * NUM_FLIGHTS + FLIGHTLESS_STATUSES.index(action.status),)
  raise ValueError(f"status {action.status!r} is not one of {schema.STATUSES}")


def action_class(action: schema.Action) -> int:
  """The one class of a submitted action (one flight at most); ValueError otherwise."""
  classes = action_classes(action)
  if len(classes) != 1:
    raise ValueError(f"{action} lists {len(classes)} flights; a submitted action names one")
  return classes[0]


def class_action(index: int, name: str = "") -> schema.Action:
  """The action of class `index` for passenger `name` (the inverse of `action_class`)."""
  if not 0 <= index < NUM_ACTIONS:
    raise ValueError(f"action class {index} is outside 0..{NUM_ACTIONS - 1}")
  status_index, position = divmod(index, NUM_FLIGHTS)
  if status_index < len(FLIGHT_STATUSES):
    return schema.Action(status=FLIGHT_STATUSES[status_index], name=name,
                         flights=(schema.FIRST_FLIGHT_NUMBER + position,))
  return schema.Action(status=FLIGHTLESS_STATUSES[index - len(FLIGHT_STATUSES) * NUM_FLIGHTS],
                       name=name)
