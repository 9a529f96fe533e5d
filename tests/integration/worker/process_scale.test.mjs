// process_scale.test.mjs: the multi-worker scale test (scale.mjs) on the real process driver and
// echo agent.
import { testScale } from './scale.mjs';

testScale('process');
