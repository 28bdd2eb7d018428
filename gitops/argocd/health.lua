-- Argo CD health check of a MultimodalDeployment (serving.multimodal.dev), read from the status the
-- operator writes. Uses the base library only, as Argo CD runs custom checks without the string library.
--   Progressing  the operator has not seen this generation yet, or it is Pending, Building or Deploying
--   Healthy      Ready=True for the current generation
--   Degraded     Stalled=True: Failed (invalid spec, failed build) or Degraded (serving pods in trouble)
local health = { status = "Progressing", message = "waiting for the operator to report on this generation" }
local status = obj.status
if status == nil or status.observedGeneration == nil or status.observedGeneration ~= obj.metadata.generation then
  return health
end
local conditions = {}
if status.conditions ~= nil then
  for _, condition in ipairs(status.conditions) do
    conditions[condition.type] = condition
  end
end
local phase = status.phase or "Pending"
local stalled, ready = conditions["Stalled"], conditions["Ready"]
if stalled ~= nil and stalled.status == "True" then
  health.status = "Degraded"
  health.message = phase .. " (" .. tostring(stalled.reason) .. "): " .. tostring(stalled.message)
elseif ready ~= nil and ready.status == "True" then
  health.status = "Healthy"
  health.message = tostring(ready.message)
elseif ready ~= nil then
  health.message = phase .. " (" .. tostring(ready.reason) .. "): " .. tostring(ready.message)
else
  health.message = phase
end
return health
